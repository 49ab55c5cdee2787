import { describe, expect, it } from 'vitest';
import { BatchScheduler } from '../../../src/scheduler/index.ts';
import { ManualClock } from './scheduler-fixtures.ts';

/**
 * The adaptive limit trades throughput for latency: a smaller gear is worth it only while it cuts a
 * batch's device time at least as much as it cuts the items per device-ms (halving the gear must
 * take the device time to ≤ 1/√2 of it). On a device whose time is mostly a fixed cost per batch,
 * shrinking buys little latency and costs most of the throughput: with a 100 ms base and a 50 ms
 * target the limit went 32 → 16 → 8 → 4 → 2 → 1, and a backlog that full batches would have
 * drained was served at a twentieth of the rate, nearly all of it answered expired.
 */
const gears = [1, 2, 4, 8, 16, 32];
const options = { priorityLevels: 3, agingMs: null, gears, maxBatchSize: 32, targetLatencyMs: 50, adaptiveWindowBatches: 5, adaptiveGrowIntervalMs: 1000 };

/** Runs full batches at the limit for `windows` adaptive windows on a device taking base + perItem × gear. */
function run(s: BatchScheduler<string>, clock: ManualClock, baseMs: number, perItemMs: number, windows: number): number[] {
  const limits: number[] = [];
  for (let w = 0; w < windows; w++) {
    for (let i = 0; i < options.adaptiveWindowBatches; i++) {
      const gear = s.limit;
      s.recordCompletion(gear, baseMs + perItemMs * gear, clock.advance(baseMs + perItemMs * gear));
    }
    limits.push(s.limit);
  }
  return limits;
}

describe('adaptive limit: a smaller gear only while it pays in device time', () => {
  it.each([
    // base-heavy: 16 items take 116 ms against 132 for 32 (0.88 > 0.71): not worth half the throughput
    { name: 'a 100 ms fixed cost per batch: the limit stays at (or returns to) 32', baseMs: 100, perItemMs: 1, settles: 32 },
    { name: 'a 50 ms fixed cost, 2 ms an item: 32 (82/114 = 0.72 for 16)', baseMs: 50, perItemMs: 2, settles: 32 },
    // item-heavy: 16 items take 53 ms against 101 (0.52): the target is met at 16
    { name: 'a 5 ms fixed cost, 3 ms an item: down to 16, where 53 ms is within the target', baseMs: 5, perItemMs: 3, settles: 16 },
    { name: 'all per-item, 6 ms an item: down to 8 (48 ms), as before', baseMs: 0, perItemMs: 6, settles: 8 },
  ])('$name', ({ baseMs, perItemMs, settles }) => {
    const clock = new ManualClock(0);
    const s = new BatchScheduler<string>(options);
    const limits = run(s, clock, baseMs, perItemMs, 12);
    expect(limits.at(-1)).toBe(settles);
    // Settled: the last windows do not move.
    expect(new Set(limits.slice(-4)).size).toBe(1);
  });

  it('a base-heavy device visits a smaller gear at most once: measured, it is not tried again', () => {
    const clock = new ManualClock(0);
    const s = new BatchScheduler<string>(options);
    const limits = run(s, clock, 100, 1, 20);
    expect(Math.min(...limits)).toBeGreaterThanOrEqual(16);
    expect(limits.filter((l) => l < 32).length).toBeLessThanOrEqual(1);
  });
});
