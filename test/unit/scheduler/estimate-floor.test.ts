import { describe, expect, it } from 'vitest';
import { BatchScheduler, DeviceTimeEstimator } from '../../../src/scheduler/index.ts';
import type { SchedulerOptionsInput } from '../../../src/scheduler/index.ts';
import { ids, req } from './scheduler-fixtures.ts';

const options: SchedulerOptionsInput = { priorityLevels: 3, maxQueueDelayMs: [0, 5, 20], agingMs: null, gears: [1, 2, 4, 8], maxBatchSize: 8 };

// Ways a gear's estimate reaches 0 ms: a 0 ms first sample, a 0 ms prior, a line extended below 0.
const cases: { name: string; options?: SchedulerOptionsInput; samples: [gear: number, ms: number][] }[] = [
  { name: 'a 0 ms first sample of the gear', samples: [[1, 0]] },
  { name: 'a 0 ms prior', options: { ...options, priorDeviceBaseMs: 0, priorDevicePerItemMs: 0 }, samples: [] },
  { name: 'a line through two larger gears extended below 0', samples: [[4, 1], [8, 20]] },
];

describe('a request due at the moment its batch would start is never dispatched (estimates are > 0)', () => {
  it.each(cases)('$name', ({ options: o, samples }) => {
    const s = new BatchScheduler<string>(o ?? options);
    samples.forEach(([gear, ms], i) => s.recordCompletion(gear, ms, i));
    s.enqueue(req({ id: 'due-now', at: 10, deadlineAt: 10 }));
    s.enqueue(req({ id: 'due-soon', at: 10, deadlineAt: 10.5 }));
    const d = s.decide(10);
    expect(ids(d.expired)).toEqual(['due-now']);
    expect(d.kind === 'dispatch' ? ids(d.batch.members) : d.kind).toEqual(['due-soon']);
    if (d.kind === 'dispatch') expect(d.batch.startAt + d.batch.estimatedDeviceMs).toBeGreaterThan(10);
  });

  it('the floor is small: an estimate learnt from real samples is left as it is', () => {
    const e = new DeviceTimeEstimator(1, 5, 0.5);
    expect(e.estimateMs(1)).toBe(5.5);
    e.record(1, 0.3);
    expect(e.estimateMs(1)).toBe(0.3);
    e.record(1, 0);
    expect(e.estimateMs(1)).toBeGreaterThan(0);
    expect(e.estimateMs(1)).toBeLessThanOrEqual(0.1);
  });
});
