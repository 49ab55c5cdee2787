import { describe, expect, it } from 'vitest';
import { DoneLines, MAX_LINE } from '../../../src/producer/done-lines.ts';

describe('DoneLines', () => {
  it('is exact: a line is done only when added (far apart, out of order, twice)', () => {
    const done = new DoneLines();
    for (const line of [1, 31, 32, 33, 5_000_000, 64, 32]) done.add(line, `id-${line}`);
    expect(done.size).toBe(6);
    const found: number[] = [];
    for (let line = 1; line <= 5_000_001; line++) if (done.isDone(line)) found.push(line);
    expect(found).toEqual([1, 31, 32, 33, 64, 5_000_000]);
    expect(() => done.add(0, 'x')).toThrow(RangeError);
    expect(() => done.add(MAX_LINE + 1, 'x')).toThrow(RangeError);
  });

  it('matches the data set it was recorded from, and not one with a line removed, an id changed, or a line missing', () => {
    const ids = Array.from({ length: 1_000 }, (_, i) => `id-${i}`);
    const record = (): DoneLines => {
      const done = new DoneLines();
      // Every line but a few (answered not ok) was done.
      ids.forEach((id, i) => i % 97 !== 5 && done.add(i + 1, id));
      return done;
    };
    const check = (data: readonly string[]): boolean => {
      const done = record();
      data.forEach((id, i) => done.checkInput(i + 1, id));
      return done.inputMatches();
    };
    expect(check(ids)).toBe(true);
    // A line not done may change: it is sent again anyway.
    expect(check(ids.map((id, i) => (i === 5 ? 'other' : id)))).toBe(true);
    expect(check(ids.filter((_, i) => i !== 500))).toBe(false);
    expect(check(ids.map((id, i) => (i === 700 ? `${id}x` : id)))).toBe(false);
    expect(check(ids.slice(0, 999))).toBe(false);
    // Two lines swapped: each line's own id is part of what is compared.
    expect(check(ids.map((id, i) => (i === 10 ? 'id-11' : i === 11 ? 'id-10' : id)))).toBe(false);
  });

  it('a line recorded ok with two ids (the data set edited between runs, then back) is not trusted by line: a line not done may hold an id done', () => {
    // Run 1 on [A, B]: A ok at line 1, B cut off. Line 1 and 2 swapped, run 2 resumed by id: B ok
    // at line 1. Swapped back to [A, B]: line 1 holds the id first recorded for it, but B, on line
    // 2 (not done by line), was answered already.
    const done = new DoneLines();
    done.add(1, 'A');
    done.add(1, 'B');
    done.checkInput(1, 'A');
    done.checkInput(2, 'B');
    expect(done.inputMatches()).toBe(false);
    expect(done.size).toBe(1);
    expect(done.linesRecordedTwice).toBe(1);
  });

  // The check is order-sensitive: each done line's number is hashed together with its id (two
  // 32-bit lanes), so no swap or move of lines leaves the sums as they were but by chance (~2^-64).
  it('catches every swap of two lines, of done lines and of a done line with one not done, for ids of several shapes', () => {
    const n = 150;
    const shapes: Record<string, (i: number) => string> = {
      counter: (i) => `id-${i}`,
      padded: (i) => `row${String(i).padStart(8, '0')}`,
      uuid: (i) => `00000000-0000-4000-8000-${i.toString(16).padStart(12, '0')}`,
      oneChar: (i) => String.fromCharCode(0x41 + i),
    };
    for (const [shape, idOf] of Object.entries(shapes)) {
      const ids = Array.from({ length: n }, (_, i) => idOf(i));
      // Lines 1..n, every seventh not done (answered not ok, or cut off by a crash).
      const notDone = (i: number): boolean => i % 7 === 3;
      const check = (data: readonly string[]): boolean => {
        const done = new DoneLines();
        ids.forEach((id, i) => !notDone(i) && done.add(i + 1, id));
        data.forEach((id, i) => done.checkInput(i + 1, id));
        return done.inputMatches();
      };
      expect(check(ids), shape).toBe(true);
      const missed: string[] = [];
      for (let i = 0; i < n; i++) {
        for (let j = i + 1; j < n; j++) {
          if (notDone(i) && notDone(j)) continue; // both are sent again whatever their order
          const swapped = [...ids];
          [swapped[i], swapped[j]] = [ids[j] as string, ids[i] as string];
          if (check(swapped)) missed.push(`${shape}: lines ${i + 1} and ${j + 1}`);
        }
      }
      expect(missed).toEqual([]);
      // A block of lines moved down by one (a line taken from after it and put before it).
      expect(check([...ids.slice(0, 20), ids[60] as string, ...ids.slice(20, 60), ...ids.slice(61)]), shape).toBe(false);
    }
  });
});
