import { fmix } from './repeat-candidates.ts';

/**
 * The entries of a resumed run that already have an ok result (`publish --out R --resume`): they
 * are not sent again.
 */
export interface DoneEntries {
  isDone(line: number, id: string): boolean;
}

/** Done by id: every id in `ids` (results written without their line, a JSON array file). ~100 B an id. */
export function doneIds(ids: ReadonlySet<string>): DoneEntries {
  return { isDone: (_line, id) => ids.has(id) };
}

/** Past this a line number in a results file is not believed (a bitmap that long would be 512 MB). */
export const MAX_LINE = 2 ** 32;

/**
 * Done by line number: one bit per line of the data set (6 MB for 50 million lines, whatever the
 * ids), exact. A line's bit says only that *some* request of that line was answered ok, so a data
 * file edited since (a line removed shifts every later one) would skip the wrong lines: the run
 * checks the data set against what was recorded first, line for line, with `checkInput` over every
 * line and `inputMatches` at the end, and resumes by line only when they match.
 */
export class DoneLines implements DoneEntries {
  private words = new Uint32Array(1024);
  /** Lines added (each once). */
  private count = 0;
  private recordedTwice = 0;
  /** Sum (mod 2^32, in two independent lanes) of a hash of each added line's number and id. */
  private sumA = 0;
  private sumB = 0;
  private inputCount = 0;
  private inputSumA = 0;
  private inputSumB = 0;

  get size(): number {
    return this.count;
  }

  /**
   * Lines recorded ok more than once. Only the first record's id is in the sums, and a bit cannot
   * say which ids a line has held: after a data set edited between resumed runs (a line's id
   * answered at another line's number), an id done may sit on a line not done, and a run by line
   * would send it again. Each run answers a line once and a resumed one never sends an id done,
   * so a second record of a line means such an edit (or two runs on one file at once).
   */
  get linesRecordedTwice(): number {
    return this.recordedTwice;
  }

  /** Records that `line`, holding `id`, has an ok result. A line recorded twice counts once (see linesRecordedTwice). */
  add(line: number, id: string): void {
    if (!Number.isInteger(line) || line < 1 || line > MAX_LINE) throw new RangeError(`line ${line} is not a line number`);
    const word = Math.floor(line / 32);
    if (word >= this.words.length) {
      const grown = new Uint32Array(Math.max(word + 1, this.words.length * 2));
      grown.set(this.words);
      this.words = grown;
    }
    const mask = 1 << line % 32;
    const w = this.words[word] as number;
    if ((w & mask) !== 0) {
      this.recordedTwice++;
      return;
    }
    this.words[word] = w | mask;
    this.count++;
    const [a, b] = lineHash(line, id);
    this.sumA = (this.sumA + a) >>> 0;
    this.sumB = (this.sumB + b) >>> 0;
  }

  isDone(line: number): boolean {
    const w = this.words[Math.floor(line / 32)];
    return w !== undefined && (w & (1 << line % 32)) !== 0;
  }

  /** One line of the data set as it is now (every line, once, in any order). */
  checkInput(line: number, id: string): void {
    if (!this.isDone(line)) return;
    this.inputCount++;
    const [a, b] = lineHash(line, id);
    this.inputSumA = (this.inputSumA + a) >>> 0;
    this.inputSumB = (this.inputSumB + b) >>> 0;
  }

  /**
   * Every line recorded done is in the data set with the id recorded for it, and none was recorded
   * with two ids. A data set changed since (a line removed, moved, or its id changed) fails this
   * but for a chance of about 2^-64.
   */
  inputMatches(): boolean {
    return this.recordedTwice === 0 && this.inputCount === this.count && this.inputSumA === this.sumA && this.inputSumB === this.sumB;
  }
}

/** Two 32-bit hashes of (line, id): FNV-1a variants seeded by the line, spread by MurmurHash3's finalizer. */
function lineHash(line: number, id: string): [number, number] {
  let h1 = Math.imul(0x811c9dc5 ^ (line >>> 0), 0x01000193);
  let h2 = Math.imul(0x01000193 ^ Math.floor(line / 2 ** 32), 0x5bd1e995) ^ Math.imul(line >>> 0, 0x27d4eb2d);
  for (let i = 0; i < id.length; i++) {
    const c = id.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 0x01000193);
    h2 = Math.imul(h2 ^ c, 0x5bd1e995);
    h2 ^= h2 >>> 15;
  }
  return [fmix(h1 ^ id.length) >>> 0, fmix(h2 ^ 0x9e3779b9) >>> 0];
}
