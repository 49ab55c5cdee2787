import { afterEach, describe, expect, it, vi } from 'vitest';
import { phaseLine, withPhaseProgress } from '../../../src/cli/phase-progress.ts';
import type { LineCounter } from '../../../src/producer/line-counter.ts';

afterEach(() => vi.useRealTimers());

describe('phaseLine', () => {
  it('says the phase, lines done, the rate and the time left (by lines when their total is known, else by bytes)', () => {
    expect(phaseLine('checking the ids of d.jsonl for repeats', { lines: 1_000, bytes: 0 }, 2_000, { totalLines: 4_000 })).toBe(
      'publish: checking the ids of d.jsonl for repeats: 1000 of 4000 lines, 500/s, ~6 s left',
    );
    expect(phaseLine('counting the lines of d.jsonl', { lines: 3_000_000, bytes: 500 }, 2_000, { totalBytes: 2_000 })).toBe('publish: counting the lines of d.jsonl: 3000000 lines, 25% of the file, 1500000/s, ~6 s left');
    expect(phaseLine('reading r.jsonl to resume', { lines: 0, bytes: 0 }, 0)).toBe('publish: reading r.jsonl to resume: 0 lines, 0/s');
  });
});

describe('withPhaseProgress', () => {
  it('prints a line each interval while the phase runs, none once it is over; a phase over within one interval prints nothing', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const printed: string[] = [];
    let nowMs = 0;
    const o = { write: (line: string) => void printed.push(line), intervalMs: 1_000, totalLines: 300, nowMs: () => nowMs };
    expect(await withPhaseProgress('quick', o, async (c) => ((c.lines = 300), 'done'))).toBe('done');
    expect(printed).toEqual([]);

    let step: () => void = () => undefined;
    const phase = withPhaseProgress('slow', o, async (c) => {
      for (let i = 0; i < 3; i++) {
        await new Promise<void>((resolve) => (step = resolve));
        c.lines += 100;
      }
      return c.lines;
    });
    for (let i = 0; i < 3; i++) {
      await Promise.resolve();
      nowMs += 1_000;
      vi.advanceTimersByTime(1_000);
      step();
    }
    expect(await phase).toBe(300);
    vi.advanceTimersByTime(5_000);
    expect(printed).toEqual(['publish: slow: 0 of 300 lines, 0/s\n', 'publish: slow: 100 of 300 lines, 50/s, ~4 s left\n', 'publish: slow: 200 of 300 lines, 67/s, ~2 s left\n']);
  });

  it('a phase that starts its reading over: the next line rates the lines read since the line before, not over ~0 s', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const printed: string[] = [];
    let nowMs = 0;
    const box: { counter?: LineCounter } = {};
    let finish: () => void = () => undefined;
    const phase = withPhaseProgress('reading r.jsonl to resume', { write: (line) => void printed.push(line), intervalMs: 1_000, nowMs: () => nowMs }, async (c) => {
      box.counter = c;
      await new Promise<void>((resolve) => (finish = resolve));
    });
    await Promise.resolve();
    box.counter!.lines = 1_000;
    nowMs = 1_000;
    vi.advanceTimersByTime(1_000);
    // The second reading starts after that line and has read 400 lines by the next one.
    box.counter!.lines = 400;
    nowMs = 2_000;
    vi.advanceTimersByTime(1_000);
    box.counter!.lines = 900;
    nowMs = 3_000;
    vi.advanceTimersByTime(1_000);
    finish();
    await phase;
    // Before: the restart was seen at the second line and timed from it: '400 lines, 400000/s'.
    expect(printed).toEqual([
      'publish: reading r.jsonl to resume: 1000 lines, 1000/s\n',
      'publish: reading r.jsonl to resume: 400 lines, 400/s\n',
      'publish: reading r.jsonl to resume: 900 lines, 450/s\n',
    ]);
  });
});
