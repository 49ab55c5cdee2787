import { afterEach, describe, expect, it } from 'vitest';
import type { ModelLanes } from '../../../src/runtime/model-lanes.ts';
import type { Payload } from '../../../src/runtime/request-admission.ts';
import { MODEL, request, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});

describe('a new model version taking over a lane', () => {
  it("is not judged by the old version's device times: what they rule out is probed on the new one", async () => {
    h = await startWorker(snapshotOf('1'));
    const lanes = (h.worker as unknown as { lanes: ModelLanes<Payload> }).lanes;
    const lane = lanes.laneFor(MODEL, undefined);
    if (!lane.ok) throw lane.error;
    // Version 1 takes 500 ms a batch (as learnt): a request due in 100 ms is out of its reach.
    for (let i = 0; i < 5; i++) lane.lane.scheduler.recordCompletion(1, 500, Date.now());
    await h.producer.publish(request('on-v1', 1, { deadlineAt: Date.now() + 100 }));
    await until(() => h!.results.has('on-v1'), 2000, 'its answer');
    expect(h.results.get('on-v1')).toMatchObject([{ status: 'expired', device: -1 }]);
    // Version 2 (a faster build) takes over the lane.
    await h.worker.applySnapshot(snapshotOf('2'));
    await h.producer.publish(request('on-v2', 1, { deadlineAt: Date.now() + 100 }));
    await until(() => h!.executions.length === 1 || h!.results.has('on-v2'), 2000, 'on the device or answered');
    expect(h.executions.map((e) => e.version)).toEqual(['2']);
    h.executions[0]?.release();
    await until(() => h!.results.has('on-v2'), 2000, 'its result');
    expect(h.results.get('on-v2')).toMatchObject([{ status: 'ok', version: '2' }]);
    // Its sample replaced version 1's estimate (the fake device reports 1.2 ms).
    expect(lane.lane.scheduler.estimateDeviceMs(1)).toBeLessThan(10);
  });

  it("a batch of the old version finishing after the switch does not teach the new version's estimates", async () => {
    h = await startWorker(snapshotOf('1'));
    const lanes = (h.worker as unknown as { lanes: ModelLanes<Payload> }).lanes;
    const lane = lanes.laneFor(MODEL, undefined);
    if (!lane.ok) throw lane.error;
    await h.producer.publish(request('old', 1));
    await until(() => h!.executions.length === 1, 2000, 'the version-1 batch on the device');
    await h.worker.applySnapshot(snapshotOf('2'));
    const samples = () => lane.lane.scheduler.stats(Date.now()).deviceEstimates.reduce((n, e) => n + e.samples, 0);
    const before = samples();
    h.executions[0]?.release();
    await until(() => h!.results.has('old'), 2000, 'its result');
    expect(h.results.get('old')).toMatchObject([{ status: 'ok', version: '1' }]);
    expect(samples()).toBe(before);
  });
});
