import { describe, expect, it } from 'vitest';
import { AdaptiveLimit, quantile } from '../../../src/scheduler/index.ts';

const gears = [1, 2, 4, 8, 16, 32];
const opts = { targetLatencyMs: 10, windowBatches: 4, hysteresis: 0.1, growIntervalMs: 100 };
const fits = () => 0; // learnt estimate says every gear fits the target

function feed(a: AdaptiveLimit, ms: number, times: number, at: { now: number }, estimate: (g: number) => number = fits): void {
  for (let i = 0; i < times; i++) a.record(ms, (at.now += 1), estimate);
}

describe('AdaptiveLimit', () => {
  it.each([
    // p90 observed → new = 32 × (10 / p90)^0.5 snapped down to a gear (at least one gear down)
    { p90: 40, expected: 16 }, // 32 × 0.5 = 16
    { p90: 12, expected: 16 }, // 32 × 0.913 = 29.2 → 16
    { p90: 160, expected: 8 }, // 32 × 0.25 = 8
    { p90: 10.9, expected: 32 }, // within hysteresis (≤ 11): no change
    { p90: 5, expected: 32 }, // under target at the top: stays
  ])('p90 $p90 ms with target 10 → limit $expected', ({ p90, expected }) => {
    const a = new AdaptiveLimit(gears, opts);
    feed(a, p90, 4, { now: 0 });
    expect(a.current).toBe(expected);
  });

  it('uses the p90 of the window, not the mean', () => {
    const a = new AdaptiveLimit(gears, { ...opts, windowBatches: 10 });
    const at = { now: 0 };
    feed(a, 5, 9, at);
    feed(a, 100, 1, at); // a single slow batch is the p100, not the p90
    expect(a.current).toBe(32);
    expect(quantile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.9)).toBe(9);
  });

  it('grows back one gear per interval, only below target × (1 − h), only if the estimate fits', () => {
    const a = new AdaptiveLimit(gears, opts);
    const at = { now: 0 };
    feed(a, 160, 4, at);
    expect(a.current).toBe(8);
    feed(a, 5, 4, at); // fast, but not yet growIntervalMs since the change
    expect(a.current).toBe(8);
    at.now += 100;
    feed(a, 9.5, 4, at); // inside the dead band: no growth
    expect(a.current).toBe(8);
    feed(a, 5, 4, at, () => 50); // estimate says 16 would take 50 ms: no growth
    expect(a.current).toBe(8);
    feed(a, 5, 4, at);
    expect(a.current).toBe(16);
    feed(a, 5, 4, at); // one gear per interval
    expect(a.current).toBe(16);
    at.now += 100;
    feed(a, 5, 4, at);
    expect(a.current).toBe(32);
    expect(a.stats.changes).toBe(3);
  });

  it('is inert when targetLatencyMs is null', () => {
    const a = new AdaptiveLimit(gears, { ...opts, targetLatencyMs: null });
    feed(a, 1000, 40, { now: 0 });
    expect(a.enabled).toBe(false);
    expect(a.current).toBe(32);
  });
});
