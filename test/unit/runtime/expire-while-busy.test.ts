import { afterEach, describe, expect, it } from 'vitest';
import { request, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});

describe('requests whose deadline passes while the device is busy', () => {
  it('are answered expired at their deadline, not when a long batch finally leaves the device', async () => {
    h = await startWorker(snapshotOf('1'));
    const { producer, executions, results } = h;
    // Two slow batches fill both device slots (an overrunning model, a slow device).
    await producer.publish(request('slow-1', 0));
    await until(() => executions.length === 1, 2000, 'the first batch');
    await producer.publish(request('slow-2', 0));
    await until(() => executions.length === 2, 2000, 'both slots taken');
    const publishedAt = Date.now();
    await producer.publish(request('in-a-hurry', 1, { deadlineAt: publishedAt + 100 }));
    await until(() => results.has('in-a-hurry'), 2000, 'the expired answer while both batches are still on the device');
    expect(results.get('in-a-hurry')).toMatchObject([{ status: 'expired' }]);
    expect(Date.now() - publishedAt).toBeLessThan(600);
    expect(executions).toHaveLength(2);
  });
});
