import { closeSync, createReadStream, createWriteStream, existsSync, openSync, readSync, rmSync, statSync, type WriteStream } from 'node:fs';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { resultToJson } from '../codec/index.ts';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { answeredCount, type BulkStats } from '../producer/bulk-publish.ts';
import { doneIds, DoneLines, MAX_LINE, type DoneEntries } from '../producer/done-lines.ts';
import type { LineCounter } from '../producer/line-counter.ts';

/**
 * `publish --out FILE`: one JSON line per record (the result in its JSON form, outputs base64, and
 * `line`: the line of the data set it answers), appended as it arrives, so a crash or Ctrl-C leaves every answer received so far on disk and
 * `--resume` carries on from there. JS thread only.
 */
export class ResultFile {
  /** A write that failed (a full disk): every later write throws it. */
  private failure: Error | undefined;
  /** Settles when the file has caught up (or closed): one for all the writes waiting on it. */
  private caughtUp: Promise<void> | undefined;

  private constructor(
    private readonly stream: WriteStream,
    /** Entries with an ok result in the file before this run (--resume): not sent again. */
    readonly done: DoneEntries,
    /** Lines of the resumed file that are not a result (a write cut off by a crash): ignored. */
    readonly unreadable: number,
    private readonly path: string,
  ) {
    // Kept, not thrown at the event loop: the run stops at its next record, saying why.
    stream.on('error', (err) => (this.failure ??= err));
  }

  /**
   * Opens FILE for a run. An existing FILE is continued only with `resume` (what it holds ok is
   * read first: `resumed`, else by id), never overwritten: it holds results already paid for in
   * device time.
   */
  static async open(path: string, resume: boolean, resumed?: ResumeState): Promise<ResultFile> {
    const exists = existsSync(path);
    if (exists && !resume) {
      throw new FleetError('INVALID_ARGUMENT', `--out ${path} exists: add --resume to continue it (requests with an ok result there are not sent again), or name another file`, {
        details: { field: 'out' },
      });
    }
    let done: DoneEntries = doneIds(new Set());
    let unreadable = 0;
    let needsNewline = false;
    if (exists) {
      ({ done, unreadable } = resumed ?? (await readResumeState(path, { byLine: false })));
      needsNewline = endsWithoutNewline(path);
    }
    const stream = createWriteStream(path, { flags: exists ? 'a' : 'wx' });
    try {
      await once(stream, 'open');
    } catch (cause) {
      throw new FleetError('INVALID_ARGUMENT', `--out ${path} cannot be written (${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message})`, { cause });
    }
    // A line cut off by a crash stays a line of its own, not the start of the next record.
    if (needsNewline) stream.write('\n');
    const file = new ResultFile(stream, done, unreadable, path);
    file.created = !exists;
    return file;
  }

  /** Made by this run (not a --resume of an existing file). */
  private created = false;
  private written = false;

  /**
   * Closes the file and, when this run made it and wrote nothing to it (it stopped before
   * publishing: the broker not answering, a Ctrl-C while the inbox opened), removes it: left
   * empty, the same command run again was refused ("--out exists: add --resume") for a run that
   * had sent nothing. A resumed file is kept as it was.
   */
  async discardIfUnused(): Promise<void> {
    await this.close().catch(() => undefined);
    if (this.created && !this.written) rmSync(this.path, { force: true });
  }

  /** Appends the record of data set line `line`; waits while the file is behind (the run then waits too). */
  async write(record: ResultEnvelope, line: number): Promise<void> {
    this.throwIfFailed();
    // The line lets --resume keep one bit per line done instead of every id done (gigabytes for a
    // data set of tens of millions of lines).
    const text = JSON.stringify({ ...resultToJson(record), line });
    this.written = true;
    // A destroyed stream (a failed write) emits neither 'drain' nor 'close' again: nothing to wait for.
    if (!this.stream.write(`${text}\n`) && !this.stream.destroyed) {
      // Shared: a run settles up to --in-flight records at once, and a race of once('drain') and
      // once('close') per write left a 'close' and an 'error' listener behind for each until the
      // end of the run (hundreds of thousands on a long one, and Node's leak warnings).
      this.caughtUp ??= new Promise<void>((resolve) => {
        const done = (): void => {
          this.stream.off('drain', done);
          this.stream.off('close', done);
          this.caughtUp = undefined;
          resolve();
        };
        this.stream.on('drain', done);
        this.stream.on('close', done);
      });
      await this.caughtUp;
      this.throwIfFailed();
    }
  }

  private throwIfFailed(): void {
    if (this.failure !== undefined) {
      throw new FleetError('INTERNAL', `writing ${this.path} failed (${(this.failure as NodeJS.ErrnoException).code ?? this.failure.message}); the records written before are kept: free space and rerun with --resume`, {
        cause: this.failure,
      });
    }
  }

  async close(): Promise<void> {
    if (this.stream.destroyed) return;
    await new Promise<void>((resolve) => this.stream.end(() => resolve()));
    this.throwIfFailed();
  }
}

/** What a resumed run found in its --out file. */
export interface ResumeState {
  readonly done: DoneEntries;
  /** Set when resuming by line: check the data set against it (DoneLines.checkInput) before trusting `done`. */
  readonly lines?: DoneLines;
  /** Ok records found (by line: lines; by id: ids). */
  readonly okCount: number;
  /** Lines that are not a result (a write cut off by a crash): ignored. */
  readonly unreadable: number;
  /** Why the file was read by id when by line was asked for: a note for the user. */
  readonly note?: string;
  /** Ids of the file's records (any status), to tell a resume of another data file (RecordSample). */
  readonly sample: RecordSample;
}

/** At most this many records are kept (as 53-bit hashes of their ids, ~300 KB) to check that a resumed --out was written for the data file. */
export const RECORD_SAMPLE_SIZE = 16_384;

/**
 * The ids of a results file's records (any status; records without an id, as a line that was not
 * JSON gets, are left out), as 53-bit hashes (an id may be long): all of them up to
 * RECORD_SAMPLE_SIZE, else that many picked evenly at random over the file (a reservoir, seeded: the
 * same file gives the same sample). A resumed run whose data file holds none of them was given
 * another file's --out: resumed, every line of the data file was sent again and appended, two data
 * sets in one RESULTS (docs/producers.md, "Scoring a data set"). A data file edited since still
 * holds most of them. Two ids of one hash only let a wrong file pass, as it did before.
 */
export class RecordSample {
  private readonly kept: number[] = [];
  private seed = 0x9e3779b9;
  private hashes: Set<number> | undefined;
  /** Records with an id seen. */
  records = 0;

  constructor(private readonly size = RECORD_SAMPLE_SIZE) {}

  add(id: string): void {
    const n = this.records++;
    this.hashes = undefined;
    if (n < this.size) {
      this.kept.push(idHash(id));
      return;
    }
    // xorshift32: a uniform pick in [0, n] for the reservoir.
    this.seed ^= this.seed << 13;
    this.seed ^= this.seed >>> 17;
    this.seed ^= this.seed << 5;
    const j = Math.floor(((this.seed >>> 0) / 2 ** 32) * (n + 1));
    if (j < this.size) this.kept[j] = idHash(id);
  }

  /** Records kept. */
  get checked(): number {
    return this.kept.length;
  }

  has(id: string): boolean {
    if (this.kept.length === 0) return false;
    this.hashes ??= new Set(this.kept);
    return this.hashes.has(idHash(id));
  }

  /** Says why the data file is not the one --out was written for, when none of the ids kept is in it (`matched` of them are). */
  refusal(out: string, file: string, matched: number, what: 'line' | 'item'): FleetError | undefined {
    if (this.records === 0 || matched > 0) return undefined;
    const which = this.records <= this.checked ? `none of its ${this.records} records` : `none of ${this.checked} of its ${this.records} records (picked across it)`;
    return new FleetError(
      'INVALID_ARGUMENT',
      `--out ${out} was written for another file: ${which} matches a${what === 'item' ? 'n item' : ' line'} of ${file} (wrong --out or --file?); nothing was sent: name the --out written for this file, or a new one`,
      { details: { field: 'out' } },
    );
  }
}

/**
 * Reads the ok records of an existing --out FILE. `byLine` (a JSON Lines data set, whose first
 * pass can check it) keeps one bit per line done; a file with an ok record that carries no line
 * (written by an earlier version) is read again by id, which holds every ok id (~100 B each).
 */
export async function readResumeState(path: string, o: { byLine: boolean; progress?: LineCounter | undefined }): Promise<ResumeState> {
  if (!statSync(path).isFile()) {
    throw new FleetError('INVALID_ARGUMENT', `--out ${path} is not a regular file: name a file to write the results to`, { details: { field: 'out' } });
  }
  if (o.byLine) {
    const lines = new DoneLines();
    const sample = new RecordSample();
    const unreadable = await forEachRecord(path, o.progress, (r) => {
      if (typeof r.id === 'string' && r.id !== '') sample.add(r.id);
      if (r.status !== 'ok' || typeof r.id !== 'string' || r.id === '') return true;
      if (typeof r.line !== 'number' || !Number.isInteger(r.line) || r.line < 1 || r.line > MAX_LINE) return false;
      lines.add(r.line, r.id);
      return true;
    });
    if (unreadable !== undefined) return { done: lines, lines, okCount: lines.size, unreadable, sample };
  }
  const ids = new Set<string>();
  const sample = new RecordSample();
  const unreadable = await forEachRecord(path, o.progress, (r) => {
    if (typeof r.id === 'string' && r.id !== '') sample.add(r.id);
    if (r.status === 'ok' && typeof r.id === 'string' && r.id !== '') ids.add(r.id);
    return true;
  });
  return {
    done: doneIds(ids),
    okCount: ids.size,
    unreadable: unreadable ?? 0,
    sample,
    ...(o.byLine ? { note: `${path} holds results without their line (written by an earlier version): resuming by id, which holds every id done in memory (about 100 B each)` } : {}),
  };
}

/** Calls `each` with every record of FILE until it returns false; the number of lines that are not JSON, or undefined when stopped. */
async function forEachRecord(path: string, progress: LineCounter | undefined, each: (r: { id?: unknown; status?: unknown; line?: unknown }) => boolean): Promise<number | undefined> {
  let unreadable = 0;
  if (progress !== undefined) progress.lines = progress.bytes = 0;
  const stream = createReadStream(path, { encoding: 'utf8' });
  const lines = createInterface({ input: stream, crlfDelay: Infinity });
  let first = true;
  try {
    for await (const read of lines) {
      if (progress !== undefined) {
        progress.lines++;
        progress.bytes = stream.bytesRead;
      }
      // An editor saving FILE as "UTF-8 with BOM" puts U+FEFF before the first record, which
      // JSON.parse refuses: that record was counted unreadable and --resume sent its line again.
      const line = first && read.charCodeAt(0) === 0xfeff ? read.slice(1) : read;
      first = false;
      if (line.trim() === '') continue;
      let r: { id?: unknown; status?: unknown; line?: unknown };
      try {
        r = JSON.parse(line) as typeof r;
      } catch {
        unreadable++;
        continue;
      }
      if (r === null || typeof r !== 'object') unreadable++;
      else if (!each(r)) return undefined;
    }
  } finally {
    lines.close();
    stream.destroy();
  }
  return unreadable;
}

/** 53 bits of two FNV-1a lanes over the id's UTF-16 units: exact in a double. */
function idHash(id: string): number {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ id.length;
  for (let i = 0; i < id.length; i++) {
    const c = id.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
    b ^= b >>> 15;
  }
  return (a >>> 0) * 2 ** 21 + ((b >>> 0) >>> 11);
}

function endsWithoutNewline(path: string): boolean {
  const size = statSync(path).size;
  if (size === 0) return false;
  const fd = openSync(path, 'r');
  try {
    const last = Buffer.alloc(1);
    readSync(fd, last, 0, 1, size - 1);
    return last[0] !== 0x0a;
  } finally {
    closeSync(fd);
  }
}

/** The progress line of a long run: how far, how fast, what came back, about how long is left. */
export function progressLine(stats: BulkStats, total: number | undefined, elapsedMs: number, awaiting: boolean): string {
  const secs = Math.max(elapsedMs / 1000, 0.001);
  const handled = awaiting ? answeredCount(stats) + stats.unanswered + stats.idInUse + stats.invalidEntries + stats.skipped : stats.read;
  const rate = (awaiting ? answeredCount(stats) + stats.unanswered : stats.published) / secs;
  const parts = [`${handled}${total === undefined ? '' : ` of ${total}`} handled`, `${stats.published} published`];
  if (awaiting) {
    const notOk = answeredCount(stats) - stats.answered.ok;
    parts.push(`${stats.answered.ok} ok`, `${notOk} not ok`, `${stats.unanswered} unanswered`);
    if (stats.idInUse > 0) parts.push(`${stats.idInUse} id in use`);
  }
  if (stats.invalidEntries > 0) parts.push(`${stats.invalidEntries} invalid`);
  if (stats.skipped > 0) parts.push(`${stats.skipped} skipped (done before)`);
  parts.push(`${Math.round(rate)}/s`);
  if (total !== undefined && rate > 0 && handled < total) parts.push(`~${Math.ceil((total - handled) / Math.max(rate, 1))} s left`);
  return `publish: ${parts.join(', ')}`;
}

/** The end-of-run summary: counts by outcome. */
export function summaryLine(stats: BulkStats, out: string | undefined): string {
  const byStatus = Object.entries(stats.answered)
    .filter(([, n]) => n > 0)
    .map(([s, n]) => `${n} ${s}`);
  const parts = [
    `${stats.read} read`,
    `${stats.published} published`,
    ...(byStatus.length > 0 ? byStatus : []),
    ...(stats.invalidEntries > 0 ? [`${stats.invalidEntries} refused before sending (invalid)`] : []),
    ...(stats.unanswered > 0 ? [`${stats.unanswered} unanswered (failed: TIMEOUT or the publish failed)`] : []),
    ...(stats.idInUse > 0 ? [`${stats.idInUse} not run, their ids held by earlier jobs of other inputs (failed: ID_IN_USE)`] : []),
    ...(stats.skipped > 0 ? [`${stats.skipped} skipped (ok in the file before)`] : []),
  ];
  return `publish: ${parts.join(', ')}${out === undefined ? '' : `; records in ${out}`}`;
}
