import { afterEach, describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { request, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});

/** Publishes one request and ends its batch on the device with `outcome`. */
async function runOne(harness: WorkerHarness, id: string, outcome: 'fail' | 'release', error?: Error): Promise<void> {
  const before = harness.executions.length;
  await harness.producer.publish(request(id, 0));
  await until(() => harness.executions.length === before + 1, 2000, `${id} on the device`);
  const execution = harness.executions[before];
  if (outcome === 'fail') execution?.fail(error ?? new FleetError('DEVICE_ERROR', 'aclmdlExecute: device lost'));
  else execution?.release();
  await until(() => harness.results.has(id), 2000, `${id} answered`);
}

describe('readiness follows the device', () => {
  it('is not ready while every recent batch fails on the device, and ready again after one succeeds', async () => {
    h = await startWorker(snapshotOf('1'));
    expect(h.worker.readiness()).toEqual({ ready: true });
    // One failed batch is one bad batch (a poison input), not a lost device.
    await runOne(h, 'a', 'fail');
    await runOne(h, 'b', 'fail');
    expect(h.worker.readiness().ready).toBe(true);
    await runOne(h, 'c', 'fail');
    const failing = h.worker.readiness();
    expect(failing.ready).toBe(false);
    expect(!failing.ready && failing.reason).toMatch(/device failing: the last 3 batches failed .*DEVICE_ERROR.*device lost/);
    expect(h.results.get('c')?.[0]?.status).toBe('failed');
    // The device is back: the next batch succeeds, and the worker is ready again.
    await runOne(h, 'd', 'release');
    expect(h.results.get('d')?.[0]?.status).toBe('ok');
    expect(h.worker.readiness()).toEqual({ ready: true });
  });

  it('does not count a batch refused for its inputs as a device failure', async () => {
    h = await startWorker(snapshotOf('1'));
    for (const id of ['a', 'b', 'c', 'd']) await runOne(h, id, 'fail', new FleetError('INVALID_ARGUMENT', 'input does not match the model'));
    expect(h.worker.readiness()).toEqual({ ready: true });
  });
});
