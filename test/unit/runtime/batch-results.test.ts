import { describe, expect, it } from 'vitest';
import { parseModelConfig } from '../../../src/contracts/config-loader.ts';
import type { Tensor } from '../../../src/contracts/tensor.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { failedBatchResults, finishedBatchResults } from '../../../src/runtime/batch-results.ts';
import type { Payload } from '../../../src/runtime/request-admission.ts';
import type { Batch, SchedulerRequest } from '../../../src/scheduler/scheduler-types.ts';

const cfg = (lateResults: 'deliver' | 'drop') =>
  parseModelConfig({
    name: 'm',
    inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 1] }],
    outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 1] }],
    maxBatchSize: 8,
    lateResults,
  });

/**
 * Members created at 1000, arrived at 1010 (wall; 510 on the monotonic clock), dispatched at 520
 * (monotonic); deadlines as given.
 */
function batchOf(deadlines: Array<number | undefined>, items = 1): Batch<Payload> {
  const members: SchedulerRequest<Payload>[] = deadlines.map((deadlineAt, i) => ({
    id: `r${i}`,
    priority: 1,
    items,
    arrivedAt: 1010,
    deadlineAt,
    payload: {
      request: { id: `r${i}`, model: 'm', createdAt: 1000, ...(deadlineAt === undefined ? {} : { deadlineAt }), inputs: [] },
      delivery: { deliveryId: `d${i}`, model: 'm', priority: 1, body: new Uint8Array(0), receivedAt: 1010, redelivered: false },
      validated: { items, length: undefined, priority: 1 },
      duplicates: [],
      arrivedMonoMs: 510,
    },
  }));
  const total = members.length * items;
  return { members, items: total, gear: 8, paddedItems: 8 - total, bucket: null, boundLength: null, paddedLengthSlots: 0, startAt: 1020, estimatedDeviceMs: 4, probe: false, reason: 'full', limit: 8 } as Batch<Payload>;
}

const out = (v: number): Tensor[] => [{ name: 'y', dtype: 'float32', shape: [1, 1], data: new Uint8Array(new Float32Array([v]).buffer) }];

describe('finishedBatchResults', () => {
  // done at 1030 after 8 ms on the device, 2 of them the execute (6 the host/device copies); gear 8
  const cases = [
    { name: 'in time: ok with its outputs', deadlines: [2000], overran: false, policy: 'deliver' as const, status: 'ok', late: false, wasted: false },
    { name: 'no deadline: ok', deadlines: [undefined], overran: false, policy: 'deliver' as const, status: 'ok', late: false, wasted: false },
    { name: 'past its deadline: ok, flagged late, its share of the execute time (not the copies) wasted', deadlines: [1025], overran: false, policy: 'deliver' as const, status: 'ok', late: true, wasted: true },
    { name: 'batch overran execTimeoutMs: late even without a deadline', deadlines: [undefined], overran: true, policy: 'deliver' as const, status: 'ok', late: true, wasted: true },
    { name: 'late under lateResults=drop: expired, no outputs', deadlines: [1025], overran: false, policy: 'drop' as const, status: 'expired', late: false, wasted: true },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const [r] = finishedBatchResults(batchOf(c.deadlines), cfg(c.policy), { perRequest: [out(7)], version: '3', dispatchedMonoMs: 520, doneAt: 1030, deviceMs: 8, executeMs: 2, overran: c.overran });
      expect(r?.result.status).toBe(c.status);
      expect(r?.result.late === true).toBe(c.late);
      // Its share of the execute time (not the copies), whether or not that was wasted.
      expect(r?.deviceSeconds).toBeCloseTo(0.00025, 9);
      expect(r?.late).toBe(c.wasted); // counted as a device-stage deadline miss, its share as wasted
      expect(r?.result).toMatchObject({ version: '3', nowMs: 1030, batchSize: 1, gear: 8, timings: { queuedMs: 10, batchWaitMs: 10, deviceMs: 8 } });
      if (c.status === 'ok') expect(r?.result.outputs).toEqual(out(7));
      else expect(r?.result.error?.code).toBe('DEADLINE_EXCEEDED');
    });
  }

  it('under lateResults=drop the expired answer says why: its deadline passed, or the batch overran execTimeoutMs', () => {
    const done = { perRequest: [out(1), out(2)], version: '1', dispatchedMonoMs: 520, doneAt: 1030, deviceMs: 8, executeMs: 2 };
    const [missed, overran] = finishedBatchResults(batchOf([1025, undefined]), cfg('drop'), { ...done, overran: true });
    expect(missed?.result.status).toBe('expired');
    expect(missed?.result.error?.message).toMatch(/5 ms after the request's deadline/);
    expect(overran?.result.status).toBe('expired');
    // It had no deadline: the message must not claim one passed, and names the setting to raise.
    expect(overran?.result.error?.message).not.toMatch(/deadline/);
    expect(overran?.result.error?.message).toMatch(/execTimeoutMs 1000/);
    expect(overran?.result.error?.message).toMatch(/lateResults/);
  });

  it('gives each member its own outputs, in member order, and its items / gear share of the execute time', () => {
    const rs = finishedBatchResults(batchOf([2000, 1025, undefined], 2), cfg('deliver'), { perRequest: [out(1), out(2), out(3)], version: '1', dispatchedMonoMs: 520, doneAt: 1030, deviceMs: 8, executeMs: 2, overran: false });
    expect(rs.map((r) => r.result.outputs?.[0]?.data[3])).toEqual([out(1)[0]?.data[3], out(2)[0]?.data[3], out(3)[0]?.data[3]]);
    expect(rs.map((r) => r.deviceSeconds)).toEqual([0.0005, 0.0005, 0.0005]);
    expect(rs.map((r) => r.late)).toEqual([false, true, false]);
  });
});

describe('failedBatchResults', () => {
  it('turns a device failure into each member its own failed result with the error', () => {
    const err = new FleetError('DEVICE_ERROR', 'aclmdlExecute failed');
    const rs = failedBatchResults(batchOf([2000, undefined]), '2', err, 1040, 520);
    expect(rs).toHaveLength(2);
    for (const r of rs) {
      expect(r.result).toMatchObject({ status: 'failed', version: '2', nowMs: 1040, gear: 8, batchSize: 2, timings: { queuedMs: 10, batchWaitMs: 10 } });
      expect(r.result.error).toBe(err);
      expect(r.deviceSeconds).toBe(0);
    }
  });
});
