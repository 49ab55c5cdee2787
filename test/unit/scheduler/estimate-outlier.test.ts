import { describe, expect, it } from 'vitest';
import { BatchScheduler, DeviceTimeEstimator } from '../../../src/scheduler/index.ts';
import { ManualClock, ids, req } from './scheduler-fixtures.ts';

const options = { priorityLevels: 3, maxQueueDelayMs: [0, 5, 20], agingMs: null, gears: [1, 2, 4, 8], maxBatchSize: 8 };
// The device: 4 + 0.625 × gear ms (gear 8 = 9 ms).
const deviceMs = (gear: number) => 4 + 0.625 * gear;

describe('one device-time outlier does not lock a gear out for good', () => {
  it('a request needing gear 8 with a 50 ms budget is dispatched again after one 5 s batch', () => {
    const clock = new ManualClock(0);
    const s = new BatchScheduler<string>(options);
    for (let i = 0; i < 20; i++) for (const g of [1, 2, 4, 8]) s.recordCompletion(g, deviceMs(g), clock.advance(1));
    // One gear-8 batch stalled (an overrun the runtime let finish) and reports 5 s.
    s.recordCompletion(8, 5000, clock.advance(1));
    // Smaller gears keep running normally; gear 8 itself only runs if the scheduler lets it.
    for (let i = 0; i < 200; i++) for (const g of [1, 2, 4]) s.recordCompletion(g, deviceMs(g), clock.advance(1));
    s.enqueue(req({ id: 'eight', items: 8, at: clock.nowMs, deadlineAt: clock.nowMs + 50 }));
    const d = s.decide(clock.nowMs);
    expect(ids(d.expired)).toEqual([]);
    expect(d.kind).toBe('dispatch');
  });

  it.each([
    { name: 'a huge outlier', samples: [9, 9, 9, 1e9] },
    { name: 'a run of outliers is still learnt (a real slowdown)', samples: [9, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90] },
    { name: 'zero-ms samples', samples: [9, 0, 0, 0] },
  ])('estimates stay finite and >= 0: $name', ({ samples }) => {
    const e = new DeviceTimeEstimator(0.2, 5, 0.5);
    for (const x of samples) e.record(8, x);
    for (const g of [1, 4, 8, 16]) {
      expect(Number.isFinite(e.estimateMs(g))).toBe(true);
      expect(e.estimateMs(g)).toBeGreaterThanOrEqual(0);
    }
    if (samples[1] === 90) expect(e.estimateMs(8)).toBeGreaterThan(80);
  });
});
