import { describe, expect, it } from 'vitest';
import { BatchScheduler } from '../../../src/scheduler/index.ts';
import { req } from './scheduler-fixtures.ts';

describe('BatchScheduler.fullBatchCost', () => {
  it('is undefined until a batch was measured: the prior is a guess, not a cost', () => {
    const s = new BatchScheduler<string>({ gears: [1, 8, 32], maxBatchSize: 32 });
    expect(s.fullBatchCost()).toBeUndefined();
    // Queued work alone teaches nothing either.
    s.enqueue(req({ id: 'a' }));
    expect(s.fullBatchCost()).toBeUndefined();
  });

  it('is the largest gear\'s learnt estimate over its size while the adaptive limit is off', () => {
    const s = new BatchScheduler<string>({ gears: [1, 8, 32], maxBatchSize: 32 });
    s.recordCompletion(32, 4, 0);
    expect(s.fullBatchCost()).toEqual({ gear: 32, deviceMsPerItem: 0.125, itemsPerRequest: 1 });
    // The EWMA (alpha 0.2) moves it: 4 + 0.2 × (8 − 4) = 4.8 ms.
    s.recordCompletion(32, 8, 1);
    expect(s.fullBatchCost()?.deviceMsPerItem).toBeCloseTo(4.8 / 32, 12);
    // A small gear's measurement does not replace the full gear's own.
    s.recordCompletion(1, 3, 2);
    expect(s.fullBatchCost()?.deviceMsPerItem).toBeCloseTo(4.8 / 32, 12);
  });

  it('a full gear not run yet is charged what the deadline checks use (derived from the measured gears)', () => {
    const s = new BatchScheduler<string>({ gears: [1, 8, 32], maxBatchSize: 32 });
    s.recordCompletion(1, 2, 0);
    s.recordCompletion(8, 4, 0);
    // The line through gear 1 (2 ms) and gear 8 (4 ms), extended to 32: 4 + (2/7) × 24 ms.
    expect(s.estimateDeviceMs(32)).toBeCloseTo(4 + (2 / 7) * 24, 9);
    expect(s.fullBatchCost()?.deviceMsPerItem).toBeCloseTo((4 + (2 / 7) * 24) / 32, 12);
  });

  it('counts the mean items of the requests dispatched so far', () => {
    const s = new BatchScheduler<string>({ gears: [1, 8, 32], maxBatchSize: 32, maxQueueDelayMs: [0, 0, 0] });
    s.enqueue(req({ id: 'two', items: 2 }));
    s.enqueue(req({ id: 'four', items: 4 }));
    const d = s.decide(0);
    expect(d.kind === 'dispatch' && d.batch.items).toBe(6);
    s.recordCompletion(8, 2, 1);
    expect(s.fullBatchCost()?.itemsPerRequest).toBe(3);
  });

  it('follows the adaptive limit: batches under a backlog hold the limit, not the largest gear', () => {
    const s = new BatchScheduler<string>({ gears: [1, 8, 32], maxBatchSize: 32, targetLatencyMs: 2, adaptiveWindowBatches: 3 });
    for (let t = 0; t < 3; t++) s.recordCompletion(32, 8, t);
    expect(s.fullBatchCost()?.gear).toBe(8);
    // p90 8 ms over a 2 ms target: 32 × (2/8)^0.5 = 16 → gear 8.
    expect(s.limit).toBe(8);
    s.recordCompletion(8, 1.6, 3);
    expect(s.fullBatchCost()).toEqual({ gear: 8, deviceMsPerItem: 0.2, itemsPerRequest: 1 });
  });
});
