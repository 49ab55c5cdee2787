import { constants as bufferConstants } from 'node:buffer';
import type { LineCounter } from './line-counter.ts';
import { readLines } from './request-file.ts';

/**
 * The ids of a run that may occur on more than one entry: every id that does is among them, and
 * some that do not may be too. bulkPublish remembers the first line of these ids only, so what a
 * run holds to refuse repeated ids is bounded by this set, not by the length of the file.
 */
export interface RepeatCandidates {
  mayRepeat(id: string): boolean;
}

/** Every id may repeat: bulkPublish remembers each (entries from a list, a JSON array). */
export const ANY_ID_MAY_REPEAT: RepeatCandidates = { mayRepeat: () => true };

/** No id repeats (made unique by construction, as synthetic requests are). */
export const NO_ID_REPEATS: RepeatCandidates = { mayRepeat: () => false };

export interface FirstPassOptions {
  /** Each line's id, with its line number as readRequestFile counts it (a resumed run checks its lines done). */
  readonly onId?: ((line: number, id: string) => void) | undefined;
  /** Each model a line names (a string `model`), as it is read: publish checks --priority against each. */
  readonly onModel?: ((model: string) => void) | undefined;
  /** Follows the lines and bytes read. */
  readonly progress?: LineCounter | undefined;
  /**
   * A line longer than this (bytes) is passed over unheld: it cannot become a request that is sent
   * (publish passes maxLineBytes(limits), the cap its reader refuses such a line by). Default: the
   * longest string V8 can make, so no line kills the pass.
   */
  readonly maxBytes?: number | undefined;
  /** Bits of the filter per id (default FILTER_BITS_PER_ID). */
  readonly bitsPerId?: number | undefined;
}

/** Bits of the first pass's filter per id: about 0.1 % of unique ids become candidates. */
export const FILTER_BITS_PER_ID = 14;

/**
 * Reads a JSON Lines request file once, before it is published, and returns the ids that may repeat
 * in it. Each line's `id` goes through a Bloom filter sized for `expectedIds` lines (2 bytes a
 * line, dropped when this returns): an id the filter has seen already becomes a candidate. A real
 * repeat always does (its second line finds the first's bits), and a unique id only when its bits
 * were all set by others (about 0.1 % at 14 bits per id): such a false candidate costs memory, never
 * a line, since bulkPublish refuses only an id it has really seen on an earlier line.
 * Lines are split and numbered by readLines, as readRequestFile reads them (node:readline, used
 * before, held a line whole and a line over 512 MB killed the process with an uncaught RangeError).
 * Lines that are not JSON objects with a string id, or are over `o.maxBytes`, cannot become a
 * request that is sent, so they are passed over. A file that cannot be read throws as the run's
 * own reading would.
 */
export async function findRepeatCandidates(path: string, expectedIds: number, o: FirstPassOptions = {}): Promise<RepeatCandidates> {
  const filter = new IdFilter(expectedIds, o.bitsPerId ?? FILTER_BITS_PER_ID);
  const candidates = new Set<string>();
  const maxBytes = o.maxBytes ?? bufferConstants.MAX_STRING_LENGTH;
  for await (const read of readLines(path, maxBytes, o.progress === undefined ? {} : { progress: o.progress })) {
    if (!('text' in read)) continue;
    // A byte order mark before the first line (readRequestFile strips it too).
    const text = read.line === 1 && read.text.charCodeAt(0) === 0xfeff ? read.text.slice(1) : read.text;
    const { id, model } = identityOfLine(text);
    if (model !== undefined) o.onModel?.(model);
    if (id === undefined) continue;
    o.onId?.(read.line, id);
    if (filter.addSeen(id)) candidates.add(id);
  }
  return { mayRepeat: (id) => candidates.has(id) };
}

/** A line's id and model, each when it is a string. */
function identityOfLine(text: string): { id?: string | undefined; model?: string | undefined } {
  if (text.trim() === '') return {};
  try {
    const value = JSON.parse(text) as unknown;
    if (value === null || typeof value !== 'object') return {};
    const { id, model } = value as Record<string, unknown>;
    return { id: typeof id === 'string' ? id : undefined, model: typeof model === 'string' ? model : undefined };
  } catch {
    return {};
  }
}

/** A Bloom filter of strings (double hashing over two 32-bit FNV-1a variants). */
export class IdFilter {
  private readonly words: Uint32Array;
  private readonly bits: number;
  private readonly hashes: number;

  constructor(expectedIds: number, bitsPerId: number) {
    this.bits = Math.max(64, Math.ceil(Math.max(1, expectedIds) * bitsPerId));
    this.words = new Uint32Array(Math.ceil(this.bits / 32));
    this.hashes = Math.max(1, Math.round(bitsPerId * Math.LN2));
  }

  /** Adds `id`; true when all its bits were set already (seen before, or a false positive). */
  addSeen(id: string): boolean {
    let h1 = 0x811c9dc5;
    let h2 = 0x01000193;
    for (let i = 0; i < id.length; i++) {
      const c = id.charCodeAt(i);
      h1 = Math.imul(h1 ^ c, 0x01000193);
      h2 = Math.imul(h2 ^ c, 0x5bd1e995);
      h2 ^= h2 >>> 15;
    }
    h1 = fmix(h1) >>> 0;
    // Odd, so the probes of one id never repeat a step of zero.
    h2 = (fmix(h2) | 1) >>> 0;
    let seen = true;
    for (let k = 0; k < this.hashes; k++) {
      // Below 2^37: exact in a double.
      const bit = (h1 + k * h2) % this.bits;
      // Not >>> and &: a filter of over 2^32 bits (300 million lines) has bit numbers past 32 bits.
      const word = Math.floor(bit / 32);
      const mask = 1 << bit % 32;
      const w = this.words[word] as number;
      if ((w & mask) === 0) {
        seen = false;
        this.words[word] = w | mask;
      }
    }
    return seen;
  }
}

/** MurmurHash3's finalizer: spreads FNV's weak low bits over the word (also done-lines.ts's hash). */
export function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return h ^ (h >>> 16);
}
