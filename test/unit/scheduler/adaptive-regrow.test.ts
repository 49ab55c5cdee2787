import { describe, expect, it } from 'vitest';
import { BatchScheduler } from '../../../src/scheduler/index.ts';
import { ManualClock } from './scheduler-fixtures.ts';

const options = { priorityLevels: 3, agingMs: null, gears: [1, 2, 4, 8], maxBatchSize: 8, targetLatencyMs: 10, adaptiveWindowBatches: 5, adaptiveGrowIntervalMs: 100 };

describe('adaptive limit grows back after a slow spell', () => {
  it('a gear learnt as slow while the device was slow does not veto growth for good', () => {
    const clock = new ManualClock(0);
    const s = new BatchScheduler<string>(options);
    // A slow spell: gear 8 takes 40 ms, long enough for its estimate to learn it; the limit halves.
    for (let i = 0; i < 5; i++) s.recordCompletion(8, 40, clock.advance(1));
    expect(s.limit).toBe(4);
    // The device recovers: gear 4 batches now take 3 ms. Gear 8 cannot run (the limit is 4), so its
    // own estimate stays at 40 ms; by gear 4's 3 ms, gear 8 takes at most 6 ms.
    for (let i = 0; i < 500; i++) s.recordCompletion(4, 3, clock.advance(10));
    expect(s.limit).toBe(8);
  });
});
