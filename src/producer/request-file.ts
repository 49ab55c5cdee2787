import { constants as bufferConstants } from 'node:buffer';
import { createReadStream, readFileSync } from 'node:fs';
import { requestFromJson } from '../codec/index.ts';
import { identityOf } from '../codec/frame.ts';
import type { CodecLimits } from '../contracts/limits.ts';
import { RequestJsonSchema, type RequestEnvelope } from '../contracts/request-envelope.ts';
import { DTYPES } from '../contracts/tensor.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { jsonSyntaxError } from '../errors/json-syntax.ts';
import type { LineCounter } from './line-counter.ts';

/**
 * One request of a request file, or why its line (or array item) is not one. `line` is the line
 * number in a JSON Lines file, the 1-based item number in a JSON array.
 */
export type FileEntry =
  | { readonly line: number; readonly request: RequestEnvelope }
  | { readonly line: number; readonly error: FleetError; readonly id?: string | undefined; readonly model?: string | undefined };

/**
 * What a request file holds: `.jsonl` / `.ndjson` are JSON Lines, one request per line, read as a
 * stream (a data set of millions of lines never sits in memory); anything else is one JSON value,
 * a request or an array of requests, read whole.
 */
export function isJsonLines(path: string): boolean {
  return /\.(jsonl|ndjson)$/i.test(path);
}

/**
 * The requests of a file, lazily: an entry is parsed when the caller pulls it, so a request that
 * carries no `createdAt` gets the time it is about to be sent (its latency starts then). A line
 * that is not a valid request becomes an error entry naming the line and the field; reading goes
 * on. A file that cannot be read, or a `.json` file that is not JSON, throws (nothing was sent).
 */
export async function* readRequestFile(path: string, limits: CodecLimits, nowMs: () => number = Date.now): AsyncGenerator<FileEntry> {
  if (!isJsonLines(path)) {
    const value = readJsonFile(path);
    const items = Array.isArray(value) ? value : [value];
    for (let i = 0; i < items.length; i++) yield parseEntry(items[i], i + 1, limits, nowMs, Array.isArray(value) ? 'item' : 'request');
    return;
  }
  const cap = maxLineBytes(limits);
  for await (const read of readLines(path, cap)) {
    const line = read.line;
    if ('tooLongBytes' in read) {
      yield { line, error: tooLong(line, read.tooLongBytes, cap, limits) };
      continue;
    }
    const text = line === 1 ? withoutBom(read.text) : read.text;
    if (text.trim() === '') continue;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      // V8's message may quote the line (a request's meta or data) around the bad token; RESULTS and stderr carry this one.
      const cause = jsonSyntaxError(err);
      yield { line, error: new FleetError('INVALID_MESSAGE', `line ${line} is not JSON: ${cause.message}`, { cause, details: { line } }) };
      continue;
    }
    yield parseEntry(value, line, limits, nowMs, 'line');
  }
}

/**
 * The longest line of a JSON Lines file that may hold a request: its tensors in base64 (4/3 of
 * their bytes, at most limits.maxMessageBytes) and the rest of the envelope (meta, id, names:
 * limits.maxHeaderBytes), with room to spare; never past the longest string V8 can make of it.
 */
export function maxLineBytes(limits: CodecLimits): number {
  return Math.min(2 * limits.maxMessageBytes + limits.maxHeaderBytes, bufferConstants.MAX_STRING_LENGTH);
}

function tooLong(line: number, bytes: number, cap: number, limits: CodecLimits): FleetError {
  return new FleetError(
    'LIMIT_EXCEEDED',
    `line ${line} is ${bytes} bytes, longer than ${cap} bytes (twice limits.maxMessageBytes ${limits.maxMessageBytes}, plus limits.maxHeaderBytes): ` +
      'no request that long fits limits.maxMessageBytes, so the line was skipped unread; split its samples over several requests and keep caller data in meta small (limits.maxMetaBytes)',
    { details: { line, field: 'line' } },
  );
}

/** A line of a JSON Lines file: its text, or only its length when it is over the cap (not held). */
export type FileLine = { readonly line: number; readonly text: string } | { readonly line: number; readonly tooLongBytes: number };

/**
 * The lines of a file, split on the bytes as node:readline (crlfDelay: Infinity) split them, and
 * numbered alike: a line ends at LF, CRLF (also across two reads) or a lone CR, and a file's last
 * line needs no end. A line of more than `maxBytes` bytes is not held: its bytes are counted and
 * dropped as they are read, and it comes out as its length (node:readline held it whole, and a line
 * over 512 MB killed the process with an uncaught "RangeError: Invalid string length"). A line of
 * blanks (spaces, tabs) only is a blank line, however long, as countRequests counts it. Text is
 * UTF-8 (a byte order mark is left to the caller). A file that cannot be opened throws naming --file.
 */
export async function* readLines(path: string, maxBytes: number, o: { progress?: LineCounter; highWaterMark?: number } = {}): AsyncGenerator<FileLine> {
  const stream = createReadStream(path, o.highWaterMark === undefined ? {} : { highWaterMark: o.highWaterMark });
  const opened = new Promise<void>((resolve, reject) => {
    stream.once('open', () => resolve());
    stream.once('error', reject);
  });
  try {
    await opened;
  } catch (cause) {
    stream.destroy();
    throw unreadable(path, cause);
  }
  let line = 0;
  /** The pieces of the line being read while it is within maxBytes; dropped once it is over. */
  let parts: Buffer[] = [];
  let bytes = 0;
  /** No byte of the line being read but blanks (only looked at once it is over maxBytes). */
  let blank = true;
  /** The last byte read ended a line with CR: an LF next is the rest of that line end. */
  let afterCr = false;
  const take = (chunk: Buffer, from: number, to: number): void => {
    if (to <= from) return;
    bytes += to - from;
    if (bytes <= maxBytes) {
      parts.push(chunk.subarray(from, to));
      return;
    }
    if (blank) {
      for (const part of parts) if (!allBlank(part, 0, part.length)) blank = false;
      if (blank && !allBlank(chunk, from, to)) blank = false;
    }
    parts = [];
  };
  const end = (): FileLine | undefined => {
    line++;
    const over = bytes > maxBytes;
    const read: FileLine | undefined = !over
      ? { line, text: parts.length === 1 ? (parts[0] as Buffer).toString('utf8') : Buffer.concat(parts, bytes).toString('utf8') }
      : blank
        ? undefined
        : { line, tooLongBytes: bytes };
    parts = [];
    bytes = 0;
    blank = true;
    return read;
  };
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      let from = 0;
      let i = 0;
      if (afterCr && chunk.length > 0) {
        afterCr = false;
        if (chunk[0] === 0x0a) from = i = 1;
      }
      // indexOf finds a line end in native code; the next LF and CR are looked up again only once passed.
      let lf = chunk.indexOf(0x0a, i);
      let cr = chunk.indexOf(0x0d, i);
      while (lf !== -1 || cr !== -1) {
        const at = lf === -1 ? cr : cr === -1 ? lf : Math.min(lf, cr);
        take(chunk, from, at);
        const read = end();
        if (read !== undefined) yield read;
        from = at + 1;
        if (chunk[at] === 0x0d) {
          if (at + 1 < chunk.length) {
            if (chunk[at + 1] === 0x0a) from = at + 2;
          } else {
            afterCr = true;
          }
        }
        if (lf !== -1 && lf < from) lf = chunk.indexOf(0x0a, from);
        if (cr !== -1 && cr < from) cr = chunk.indexOf(0x0d, from);
      }
      take(chunk, from, chunk.length);
      if (o.progress !== undefined) {
        o.progress.lines = line;
        o.progress.bytes += chunk.length;
      }
    }
    if (bytes > 0) {
      const read = end();
      if (read !== undefined) yield read;
    }
  } finally {
    stream.destroy();
  }
}

function allBlank(buf: Buffer, from: number, to: number): boolean {
  for (let i = from; i < to; i++) {
    const b = buf[i];
    if (b !== 0x20 && b !== 0x09) return false;
  }
  return true;
}

function parseEntry(value: unknown, line: number, limits: CodecLimits, nowMs: () => number, what: 'line' | 'item' | 'request'): FileEntry {
  const identity = identityOf(value);
  try {
    checkFields(value);
    checkDtypes(value);
    return { line, request: requestFromJson(withCreatedAt(value, nowMs), limits) };
  } catch (err) {
    const e = FleetError.from(err, 'INVALID_MESSAGE');
    const where = what === 'request' ? '' : `${what} ${line}: `;
    return {
      line,
      error: new FleetError(e.code, `${where}${e.message}`, { cause: e, details: { ...e.details, line } }),
      id: identity['id'],
      model: identity['model'],
    };
  }
}

const REQUEST_FIELDS = Object.keys(RequestJsonSchema.shape);

/**
 * A field the request envelope does not have is refused here, at the file, though the wire drops
 * such fields (a newer producer's may reach an older worker): in a file someone wrote, it is a typo,
 * and "deadline" for deadlineAt scored ok with no deadline at all.
 */
function checkFields(value: unknown): void {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return;
  const unknown = Object.keys(value).find((k) => !REQUEST_FIELDS.includes(k));
  if (unknown === undefined) return;
  const meant = REQUEST_FIELDS.find((k) => closeTo(unknown, k));
  const hint = meant === undefined ? `; a request has ${REQUEST_FIELDS.join(', ')}: put caller data in meta` : ` (did you mean "${meant}"?)`;
  throw new FleetError('INVALID_MESSAGE', `unknown field "${unknown}"${hint}`, { details: { field: unknown } });
}

/**
 * A dtype the fleet does not carry, named once with those it does: the schema's message listed
 * them, and its hint listed them again.
 */
function checkDtypes(value: unknown): void {
  const inputs = value !== null && typeof value === 'object' ? (value as Record<string, unknown>)['inputs'] : undefined;
  if (!Array.isArray(inputs)) return;
  inputs.forEach((t: unknown, i) => {
    const dtype = t !== null && typeof t === 'object' ? (t as Record<string, unknown>)['dtype'] : undefined;
    if (typeof dtype !== 'string' || (DTYPES as readonly string[]).includes(dtype)) return;
    const like = dtype.startsWith('float') ? 'float32' : dtype.startsWith('uint') ? 'uint8' : dtype.startsWith('int') ? 'int32 or int64' : 'float32';
    throw new FleetError(
      'INVALID_MESSAGE',
      `inputs[${i}].dtype ${JSON.stringify(dtype.slice(0, 40))} is not a dtype the fleet carries: use one of ${DTYPES.map((d) => JSON.stringify(d)).join(', ')} (convert the data, e.g. ${dtype.slice(0, 40)} to ${like})`,
      { details: { field: `inputs[${i}].dtype` } },
    );
  });
}

/** A misspelling or a part of `known`: one starts the other, or at most 2 edits apart. */
function closeTo(word: string, known: string): boolean {
  const a = word.toLowerCase();
  const b = known.toLowerCase();
  if (a.length >= 3 && (b.startsWith(a) || a.startsWith(b))) return true;
  if (Math.abs(a.length - b.length) > 2) return false;
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) next[j] = Math.min((row[j] as number) + 1, (next[j - 1] as number) + 1, (row[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1));
    row = next;
  }
  return (row[b.length] as number) <= 2;
}

/** publish is the producer here: a request in a file need not carry createdAt. */
function withCreatedAt(value: unknown, nowMs: () => number): unknown {
  if (value !== null && typeof value === 'object' && !Array.isArray(value) && (value as Record<string, unknown>)['createdAt'] === undefined) {
    return { ...value, createdAt: nowMs() };
  }
  return value;
}

function readJsonFile(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (cause) {
    throw unreadable(path, cause);
  }
  try {
    return JSON.parse(withoutBom(text));
  } catch (err) {
    const cause = jsonSyntaxError(err);
    const hint = /}\s*\n\s*{/.test(text) ? '; it looks like JSON Lines (one request per line): name it .jsonl' : '';
    throw new FleetError('INVALID_ARGUMENT', `--file ${path} is not JSON: ${cause.message}; it holds one request as JSON, or an array of them${hint} (docs/producers.md)`, { cause });
  }
}

/** Windows editors (Notepad, Excel's "CSV UTF-8") start a file with a byte order mark, which JSON.parse refuses. */
function withoutBom(text: string): string {
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

function unreadable(path: string, cause: unknown): FleetError {
  return new FleetError('INVALID_ARGUMENT', `--file ${path} cannot be read (${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message})`, { cause });
}

/**
 * Non-blank lines of a JSON Lines file (or items of a JSON file: 1, or the array's length), for
 * progress. Streams; `progress` follows the lines and bytes read.
 */
export async function countRequests(path: string, progress?: LineCounter): Promise<number> {
  if (!isJsonLines(path)) {
    const value = readJsonFile(path);
    return Array.isArray(value) ? value.length : 1;
  }
  let count = 0;
  let content = false;
  // Lines end as readRequestFile's reader (readLines) ends them: LF, CRLF, or a CR alone (the LF of
  // a CRLF then ends a blank line, not counted). Counted by LF only, a file of CR line ends was one
  // line, and the first pass's filter sized for one id made every id a repeat candidate.
  let start = true;
  for await (const chunk of createReadStream(path) as AsyncIterable<Buffer>) {
    // A byte order mark is no content (the reader strips it): counted, a file starting with a
    // blank line after it counted one request more than it holds.
    const from = start && chunk.length >= 3 && chunk[0] === 0xef && chunk[1] === 0xbb && chunk[2] === 0xbf ? 3 : 0;
    start = false;
    for (let i = from; i < chunk.length; i++) {
      const b = chunk[i] as number;
      if (b === 0x0a || b === 0x0d) {
        if (content) count++;
        content = false;
      } else if (b !== 0x20 && b !== 0x09) {
        content = true;
      }
    }
    if (progress !== undefined) {
      progress.lines = count;
      progress.bytes += chunk.length;
    }
  }
  return content ? count + 1 : count;
}
