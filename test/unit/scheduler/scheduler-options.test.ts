import { describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { resolveSchedulerOptions } from '../../../src/scheduler/index.ts';
import type { SchedulerOptionsInput } from '../../../src/scheduler/index.ts';

describe('resolveSchedulerOptions', () => {
  it('fills defaults', () => {
    const o = resolveSchedulerOptions();
    expect(o.maxBatchSize).toBe(32);
    expect(o.gears).toHaveLength(32);
    expect(o.gearsConfigured).toBe(false);
    expect(o.maxQueueDelayMs).toEqual([0, 5, 20]);
    expect(o.resumeBelowItems).toBe(2048);
    expect(o.agingMs).toBe(1000);
    expect(o.targetLatencyMs).toBeNull();
  });

  it('caps gears at maxBatchSize, repeats the last default delay, maps null delay to Infinity', () => {
    expect(resolveSchedulerOptions({ gears: [1, 2, 4, 8, 16, 32], maxBatchSize: 20 }).gears).toEqual([1, 2, 4, 8, 16]);
    expect(resolveSchedulerOptions({ gears: [1, 2, 4, 8, 16, 32], maxBatchSize: 20 }).maxBatchSize).toBe(16);
    expect(resolveSchedulerOptions({ priorityLevels: 5 }).maxQueueDelayMs).toEqual([0, 5, 20, 20, 20]);
    expect(resolveSchedulerOptions({ priorityLevels: 2, maxQueueDelayMs: [0, null] }).maxQueueDelayMs).toEqual([0, Infinity]);
  });

  it.each<{ input: SchedulerOptionsInput; path: string }>([
    { input: { gears: [4, 2] }, path: 'gears' },
    { input: { buckets: [0, 8] }, path: 'buckets.0' },
    { input: { priorityLevels: 2, maxQueueDelayMs: [0, 1, 2] }, path: 'maxQueueDelayMs' },
    { input: { softLimitItems: 10, hardLimitItems: 5 }, path: 'hardLimitItems' },
    { input: { softLimitItems: 10, resumeBelowItems: 10 }, path: 'resumeBelowItems' },
    { input: { gears: [64], maxBatchSize: 32 }, path: 'gears' },
    { input: { ewmaAlpha: 0 }, path: 'ewmaAlpha' },
    { input: { nope: 1 } as SchedulerOptionsInput, path: '' },
  ])('rejects $path with INVALID_CONFIG naming it', ({ input, path }) => {
    let error: unknown;
    try {
      resolveSchedulerOptions(input);
    } catch (e) {
      error = e;
    }
    expect(FleetError.is(error, 'INVALID_CONFIG')).toBe(true);
    expect((error as FleetError).details.path).toBe(path);
  });
});
