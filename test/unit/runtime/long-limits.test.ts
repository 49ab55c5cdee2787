import { afterEach, describe, expect, it } from 'vitest';
import { modelConfig, request, snapshotWith, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});

describe('execTimeoutMs and worker.hangLimitMs longer than a timer can wait (2^31 - 1 ms)', () => {
  it('mean "practically never", not 1 ms: a 50 ms batch is neither late nor a hang', async () => {
    const forever = 40 * 86_400_000;
    h = await startWorker(snapshotWith({ ...modelConfig, execTimeoutMs: forever }, '1'), { hangLimitMs: forever });
    await h.producer.publish(request('r', 1));
    await until(() => h!.executions.length === 1, 2000, 'the batch on the device');
    await new Promise((r) => setTimeout(r, 50));
    expect(h.worker.status).toBe('running');
    h.executions[0]?.release();
    await until(() => h!.results.has('r'), 2000, 'its result');
    expect(h.results.get('r')).toMatchObject([{ status: 'ok' }]);
    expect(h.results.get('r')?.[0]?.late).toBeUndefined();
  });

  it('a worker.drainTimeoutMs beyond the cap waits for the drain instead of timing out at once', async () => {
    h = await startWorker(snapshotWith(modelConfig, '1'), { drainTimeoutMs: 40 * 86_400_000 });
    await h.producer.publish([request('on-device', 1)]);
    await until(() => h!.executions.length === 1, 2000, 'the batch on the device');
    const drained = h.worker.drain();
    await new Promise((r) => setTimeout(r, 50));
    h.executions[0]?.release();
    expect(await drained).toEqual({ released: 0, timedOut: false });
    await until(() => h!.results.has('on-device'), 2000, 'its result');
    expect(h.results.get('on-device')).toMatchObject([{ status: 'ok' }]);
  });
});
