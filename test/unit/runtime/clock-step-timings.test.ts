import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { fakeClocks } from './fake-clocks.ts';
import { MODEL, request, sample, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  vi.useRealTimers();
  await stopWorker(h);
  h = undefined;
});

/** The lowest priority of mlp-classifier waits 20 ms to fill a batch. */
const FILL_DELAY_MS = 20;

/**
 * Publishes one lowest-priority request, steps the worker's wall clock by `stepMs` 5 ms after, and
 * ends its batch with `outcome` once it is on the device. Its result, and the queue-wait
 * histogram's sum in seconds.
 */
async function acrossStep(harness: WorkerHarness, id: string, stepMs: number, outcome: 'release' | 'fail'): Promise<{ result: ResultEnvelope; queueWaitSeconds: number }> {
  const clocks = fakeClocks();
  try {
    await harness.producer.publish(request(id, 2));
    await new Promise((r) => setTimeout(r, 5));
    clocks.stepWall(stepMs);
    await until(() => harness.executions.length === 1, 5000, `${id} on the device`);
    if (outcome === 'release') harness.executions[0]?.release();
    else harness.executions[0]?.fail(new FleetError('DEVICE_ERROR', 'aclmdlExecute: device lost'));
    await until(() => harness.results.has(id), 5000, `${id} answered`);
  } finally {
    clocks.stop();
  }
  const text = await harness.metrics.render();
  return { result: harness.results.get(id)?.[0] as ResultEnvelope, queueWaitSeconds: sample(text, 'npu_fleet_queue_wait_seconds_sum', { model: MODEL }) };
}

describe('batch wait and queue wait across a wall-clock step count the time that passed', () => {
  // Before: batchWaitMs ~60020 and a 60 s queue wait.
  it('a step forward of 1 min while the request is queued', async () => {
    h = await startWorker(snapshotOf('1'));
    const { result, queueWaitSeconds } = await acrossStep(h, 'fwd', 60_000, 'release');
    expect(result.status).toBe('ok');
    expect(result.timings.batchWaitMs).toBeGreaterThanOrEqual(FILL_DELAY_MS - 5);
    expect(result.timings.batchWaitMs).toBeLessThan(1000);
    expect(queueWaitSeconds).toBeLessThan(1);
  });

  // Before: 20 - 2000 ms, clamped to 0.
  it('a step back of 2 s while the request is queued', async () => {
    h = await startWorker(snapshotOf('1'));
    const { result, queueWaitSeconds } = await acrossStep(h, 'back', -2000, 'release');
    expect(result.status).toBe('ok');
    expect(result.timings.batchWaitMs).toBeGreaterThanOrEqual(FILL_DELAY_MS - 5);
    expect(result.timings.batchWaitMs).toBeLessThan(1000);
    expect(queueWaitSeconds).toBeGreaterThanOrEqual((FILL_DELAY_MS - 5) / 1000);
  });

  // Before: batchWaitMs ~60020 in the failed result too.
  it('a batch that fails on the device after a step forward', async () => {
    h = await startWorker(snapshotOf('1'));
    const { result, queueWaitSeconds } = await acrossStep(h, 'failed', 60_000, 'fail');
    expect(result.status).toBe('failed');
    expect(result.timings.batchWaitMs).toBeLessThan(1000);
    expect(queueWaitSeconds).toBeLessThan(1);
  });

  // Before: batchWaitMs ~60005: the step forward passed its deadline, and the whole step counted as its wait.
  it('a request expired in the queue by a step forward past its deadline', async () => {
    h = await startWorker(snapshotOf('1'));
    const clocks = fakeClocks();
    try {
      await h.producer.publish(request('expired', 2, { deadlineAt: Date.now() + 10_000 }));
      await new Promise((r) => setTimeout(r, 5));
      clocks.stepWall(60_000);
      await until(() => h!.results.has('expired'), 5000, 'the expired result');
    } finally {
      clocks.stop();
    }
    const result = h.results.get('expired')?.[0];
    expect(result?.status).toBe('expired');
    expect(h.executions).toHaveLength(0);
    expect(result?.timings.batchWaitMs).toBeLessThan(1000);
    expect(sample(await h.metrics.render(), 'npu_fleet_queue_wait_seconds_sum', { model: MODEL })).toBeLessThan(1);
  });
});

describe('a device hang across a wall-clock step', () => {
  // Before: elapsedMs = 200 ms - 60 s, about -59800.
  it('reports the time the batch really spent on the device', async () => {
    h = await startWorker(snapshotOf('1'), { hangLimitMs: 200 });
    const harness = h;
    const clocks = fakeClocks();
    try {
      await harness.producer.publish(request('stuck', 0));
      await until(() => harness.executions.length === 1, 2000, 'the batch on the device');
      clocks.stepWall(-60_000);
      await until(() => harness.lines.some((l) => l['elapsedMs'] !== undefined), 5000, 'the hang logged');
    } finally {
      clocks.stop();
    }
    const elapsedMs = harness.lines.find((l) => l['elapsedMs'] !== undefined)?.['elapsedMs'] as number;
    expect(elapsedMs).toBeGreaterThanOrEqual(100);
    expect(elapsedMs).toBeLessThan(1000);
  });
});
