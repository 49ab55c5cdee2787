import { describe, expect, it } from 'vitest';
import { parseModelConfig } from '../../../src/contracts/config-loader.ts';
import type { Tensor } from '../../../src/contracts/tensor.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';
import { Answerer } from '../../../src/runtime/answerer.ts';
import { finishedBatchResults } from '../../../src/runtime/batch-results.ts';
import type { Payload } from '../../../src/runtime/request-admission.ts';
import type { Batch, SchedulerRequest } from '../../../src/scheduler/scheduler-types.ts';
import type { FrameClaim, NewerFrame, Outcome, Transport } from '../../../src/transport/transport.ts';

const cfg = (lateResults: 'deliver' | 'drop') =>
  parseModelConfig({
    name: 'cam-model',
    inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 1] }],
    outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 1] }],
    maxBatchSize: 8,
    lateResults,
    streams: { superseded: 'drop' },
  });

/** Frames of camera `cam`, created at 1000 + i, one item each, in a batch of gear 8. */
function batchOf(frames: Array<{ deadlineAt?: number }>): Batch<Payload> {
  const members: SchedulerRequest<Payload>[] = frames.map(({ deadlineAt }, i) => ({
    id: `f${i}`,
    priority: 1,
    items: 1,
    arrivedAt: 1010,
    deadlineAt,
    streamKey: 'cam',
    createdAt: 1000 + i,
    payload: {
      request: { id: `f${i}`, model: 'cam-model', createdAt: 1000 + i, streamKey: 'cam', ...(deadlineAt === undefined ? {} : { deadlineAt }), inputs: [] },
      delivery: { deliveryId: `d${i}`, model: 'cam-model', priority: 1, body: new Uint8Array(0), receivedAt: 1010, redelivered: false },
      validated: { items: 1, length: undefined, priority: 1 },
      duplicates: [],
      arrivedMonoMs: 510,
    },
  }));
  return { members, items: members.length, gear: 8, paddedItems: 8 - members.length, bucket: null, boundLength: null, paddedLengthSlots: 0, startAt: 1020, estimatedDeviceMs: 4, probe: false, reason: 'full', limit: 8 } as Batch<Payload>;
}

const out: Tensor[] = [{ name: 'y', dtype: 'float32', shape: [1, 1], data: new Uint8Array(4) }];

/** A BullMQ-like transport whose frame claims refuse the request ids in `refuse` (a newer frame was answered elsewhere). */
function claimingTransport(refuse: ReadonlySet<string>) {
  const settled: Outcome[] = [];
  const newer: NewerFrame = { requestId: 'elsewhere', frameAt: 5000 };
  const t = {
    settle: async (outcomes: readonly Outcome[]) => void settled.push(...outcomes),
    claimNewestFrames: async (frames): Promise<FrameClaim> => ({ newer: frames.map((f) => (refuse.has(f.requestId) ? newer : undefined)), release: () => undefined }),
  } satisfies Pick<Transport, 'settle' | 'claimNewestFrames'>;
  return { transport: t as unknown as Transport, settled };
}

async function wastedAfter(refuse: ReadonlySet<string>, lateResults: 'deliver' | 'drop', frames: Array<{ deadlineAt?: number }>, overran = false) {
  const metrics = new FleetMetrics({ processMetrics: false });
  const { transport, settled } = claimingTransport(refuse);
  const a = new Answerer({ transport, metrics, log: createLogger({ level: 'silent' }), publishLingerMs: 0, ctx: { worker: 'w', device: 0 }, serves: () => true, answered: () => undefined });
  const c = cfg(lateResults);
  // 8 ms execute at gear 8: 1 ms of device time per one-item frame.
  a.answerBatch(c, finishedBatchResults(batchOf(frames), c, { perRequest: frames.map(() => out), version: '1', dispatchedMonoMs: 520, doneAt: 1030, deviceMs: 10, executeMs: 8, overran }));
  await a.close();
  const text = await metrics.render();
  const wasted = (reason: string) => {
    const line = text.split('\n').find((l) => l.startsWith(`npu_fleet_wasted_device_seconds_total{model="cam-model",reason="${reason}"}`));
    return line === undefined ? 0 : Number(line.split(' ').at(-1));
  };
  return { superseded: wasted('superseded'), late: wasted('late'), expired: wasted('expired'), statuses: settled.map((o) => `${o.result.id}:${o.result.status}`) };
}

describe('Answerer: device time of frames refused after the device', () => {
  it('counts a refused frame its share of the execute time as wasted, reason superseded; the frames that went out ok count nothing', async () => {
    const r = await wastedAfter(new Set(['f0', 'f2']), 'deliver', [{}, {}, {}]);
    expect(r.statuses).toEqual(['f0:rejected', 'f1:ok', 'f2:rejected']);
    expect(r.superseded).toBeCloseTo(0.002, 9);
    expect(r.late).toBe(0);
  });

  it('nothing refused: nothing wasted', async () => {
    const r = await wastedAfter(new Set(), 'deliver', [{}, {}]);
    expect(r.statuses).toEqual(['f0:ok', 'f1:ok']);
    expect(r.superseded).toBe(0);
  });

  it('a late frame that is also refused is counted once, as late', async () => {
    // f0 missed its deadline (1025 < done 1030) and is refused too; f1 is only refused.
    const r = await wastedAfter(new Set(['f0', 'f1']), 'deliver', [{ deadlineAt: 1025 }, { deadlineAt: 2000 }]);
    expect(r.statuses).toEqual(['f0:rejected', 'f1:rejected']);
    expect(r.late).toBeCloseTo(0.001, 9);
    expect(r.superseded).toBeCloseTo(0.001, 9);
  });

  it('a frame dropped as expired is not claimed, so counts as expired only', async () => {
    const r = await wastedAfter(new Set(['f0']), 'drop', [{ deadlineAt: 1025 }]);
    expect(r.statuses).toEqual(['f0:expired']);
    expect(r.expired).toBeCloseTo(0.001, 9);
    expect(r.superseded).toBe(0);
  });
});
