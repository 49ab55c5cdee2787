import { closeSync, createReadStream, createWriteStream, existsSync, openSync, readSync, statSync, type WriteStream } from 'node:fs';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { resultToJson } from '../codec/index.ts';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { answeredCount, type BulkStats } from '../producer/bulk-publish.ts';

/**
 * `publish --out FILE`: one JSON line per record (the result in its JSON form, outputs base64),
 * appended as it arrives, so a crash or Ctrl-C leaves every answer received so far on disk and
 * `--resume` carries on from there. JS thread only.
 */
export class ResultFile {
  /** A write that failed (a full disk): every later write throws it. */
  private failure: Error | undefined;
  /** Settles when the file has caught up (or closed): one for all the writes waiting on it. */
  private caughtUp: Promise<void> | undefined;

  private constructor(
    private readonly stream: WriteStream,
    /** Ids with an ok result in the file before this run (--resume): not sent again. */
    readonly done: ReadonlySet<string>,
    /** Lines of the resumed file that are not a result (a write cut off by a crash): ignored. */
    readonly unreadable: number,
    private readonly path: string,
  ) {
    // Kept, not thrown at the event loop: the run stops at its next record, saying why.
    stream.on('error', (err) => (this.failure ??= err));
  }

  /**
   * Opens FILE for a run. An existing FILE is continued only with `resume` (its ok ids are read
   * first), never overwritten: it holds results already paid for in device time.
   */
  static async open(path: string, resume: boolean): Promise<ResultFile> {
    const exists = existsSync(path);
    if (exists && !resume) {
      throw new FleetError('INVALID_ARGUMENT', `--out ${path} exists: add --resume to continue it (requests with an ok result there are not sent again), or name another file`, {
        details: { field: 'out' },
      });
    }
    let done = new Set<string>();
    let unreadable = 0;
    let needsNewline = false;
    if (exists && !statSync(path).isFile()) {
      throw new FleetError('INVALID_ARGUMENT', `--out ${path} is not a regular file: name a file to write the results to`, { details: { field: 'out' } });
    }
    if (exists) {
      ({ done, unreadable } = await readDone(path));
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
    return new ResultFile(stream, done, unreadable, path);
  }

  /** Appends one record; waits while the file is behind (the run then waits too). */
  async write(record: ResultEnvelope): Promise<void> {
    this.throwIfFailed();
    // A destroyed stream (a failed write) emits neither 'drain' nor 'close' again: nothing to wait for.
    if (!this.stream.write(`${JSON.stringify(resultToJson(record))}\n`) && !this.stream.destroyed) {
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

async function readDone(path: string): Promise<{ done: Set<string>; unreadable: number }> {
  const done = new Set<string>();
  let unreadable = 0;
  const lines = createInterface({ input: createReadStream(path, { encoding: 'utf8' }), crlfDelay: Infinity });
  for await (const line of lines) {
    if (line.trim() === '') continue;
    try {
      const r = JSON.parse(line) as { id?: unknown; status?: unknown };
      if (r.status === 'ok' && typeof r.id === 'string' && r.id !== '') done.add(r.id);
    } catch {
      unreadable++;
    }
  }
  return { done, unreadable };
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
  const handled = awaiting ? answeredCount(stats) + stats.unanswered + stats.invalidEntries + stats.skipped : stats.read;
  const rate = (awaiting ? answeredCount(stats) + stats.unanswered : stats.published) / secs;
  const parts = [`${handled}${total === undefined ? '' : ` of ${total}`} handled`, `${stats.published} published`];
  if (awaiting) {
    const notOk = answeredCount(stats) - stats.answered.ok;
    parts.push(`${stats.answered.ok} ok`, `${notOk} not ok`, `${stats.unanswered} unanswered`);
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
    ...(stats.skipped > 0 ? [`${stats.skipped} skipped (ok in the file before)`] : []),
  ];
  return `publish: ${parts.join(', ')}${out === undefined ? '' : `; records in ${out}`}`;
}
