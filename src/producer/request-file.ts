import { createReadStream, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { requestFromJson } from '../codec/index.ts';
import { identityOf } from '../codec/frame.ts';
import type { CodecLimits } from '../contracts/limits.ts';
import { RequestJsonSchema, type RequestEnvelope } from '../contracts/request-envelope.ts';
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
  const stream = createReadStream(path, { encoding: 'utf8' });
  const opened = new Promise<void>((resolve, reject) => {
    stream.once('open', () => resolve());
    stream.once('error', reject);
  });
  try {
    await opened;
  } catch (cause) {
    throw unreadable(path, cause);
  }
  const lines = createInterface({ input: stream, crlfDelay: Infinity });
  let line = 0;
  try {
    for await (const read of lines) {
      line++;
      const text = line === 1 ? withoutBom(read) : read;
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
  } finally {
    lines.close();
    stream.destroy();
  }
}

function parseEntry(value: unknown, line: number, limits: CodecLimits, nowMs: () => number, what: 'line' | 'item' | 'request'): FileEntry {
  const identity = identityOf(value);
  try {
    checkFields(value);
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
  // Lines end as readRequestFile's reader (readline) ends them: LF, CRLF, or a CR alone (the LF of
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
