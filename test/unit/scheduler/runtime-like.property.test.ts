import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { SchedulerOptionsInput } from '../../../src/scheduler/index.ts';
import { runRuntimeLike } from './runtime-driver.ts';
import type { DeviceModel, Step } from './runtime-driver.ts';

// Table of scheduler shapes; every delay is finite so that nothing may be left queued at the end.
const shapes: { name: string; options: SchedulerOptionsInput; bucketed: boolean }[] = [
  { name: 'gears, aging, trim', options: { maxBatchSize: 8, gears: [1, 2, 4, 8], maxQueueDelayMs: [0, 2, 10], agingMs: 20 }, bucketed: false },
  { name: 'no gears, strict priority', options: { maxBatchSize: 6, maxQueueDelayMs: [0, 3, 8], agingMs: null }, bucketed: false },
  { name: 'odd gears, adaptive', options: { maxBatchSize: 12, gears: [2, 3, 8, 12], maxQueueDelayMs: [1, 5, 30], targetLatencyMs: 6, adaptiveWindowBatches: 3, adaptiveGrowIntervalMs: 10 }, bucketed: false },
  { name: 'buckets, aging, byte limits', options: { maxBatchSize: 8, gears: [1, 4, 8], buckets: [4, 8, 16], maxQueueDelayMs: [0, 4, 12], agingMs: 10, softLimitBytes: 2000, hardLimitBytes: 4000 }, bucketed: true },
];

const arbStep = (bucketed: boolean): fc.Arbitrary<Step> =>
  fc.record({
    gapMs: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 3, noNaN: true })),
    priority: fc.integer({ min: 0, max: 2 }),
    items: fc.integer({ min: 1, max: 5 }),
    deadlineMs: fc.option(fc.double({ min: 0, max: 60, noNaN: true }), { nil: null }),
    bytes: fc.integer({ min: 0, max: 400 }),
    length: bucketed ? fc.integer({ min: 0, max: 16 }) : fc.constant(undefined),
    cancelBack: fc.option(fc.integer({ min: 0, max: 5 }), { nil: null, freq: 8 }),
  }) as fc.Arbitrary<Step>;

const arbDevice: fc.Arbitrary<DeviceModel> = fc.record({
  baseMs: fc.double({ min: 0.5, max: 5, noNaN: true }),
  perItemMs: fc.double({ min: 0, max: 1, noNaN: true }),
  outlierEvery: fc.constantFrom(0, 7, 25),
  outlierMs: fc.constantFrom(0.001, 500, 1e6),
  zeroEvery: fc.constantFrom(0, 5),
});

describe('BatchScheduler driven like the worker (two in flight, level cap, cancellations, odd timings)', () => {
  it.each(shapes)('$name: invariants hold and nothing is left queued', ({ options, bucketed }) => {
    fc.assert(
      // size 'max': the default size draws about ten steps, too few to fill the queue, shrink the
      // adaptive limit or hit the zero-sample and outlier batches.
      fc.property(fc.array(arbStep(bucketed), { minLength: 1, maxLength: 1000, size: 'max' }), arbDevice, (steps, device) => {
        const out = runRuntimeLike({ ...options, softLimitItems: 30, hardLimitItems: 60 }, steps, device);
        expect(out.breaches).toEqual([]);
        expect(out.stranded).toEqual([]);
      }),
      { numRuns: 300 },
    );
  });
});
