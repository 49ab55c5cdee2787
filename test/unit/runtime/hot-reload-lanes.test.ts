import { afterEach, describe, expect, it } from 'vitest';
import { request, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});

describe('hot reload on a device worker (controlled device)', () => {
  it('requests queued when their model leaves the repository still get a result', async () => {
    h = await startWorker(snapshotOf('1'));
    const { producer, executions, results, worker } = h;
    // An urgent request occupies the device; bulk work then waits for the device to be idle.
    await producer.publish(request('urgent', 0));
    await until(() => executions.length === 1, 2000, 'the urgent batch on the device');
    await producer.publish(request('bulk', 2));
    await new Promise((r) => setTimeout(r, 50));
    expect(executions).toHaveLength(1);

    await worker.applySnapshot(snapshotOf());
    executions[0]!.release();
    await until(() => results.has('urgent'), 2000, 'the urgent result');
    // The queued request runs on the draining version before it is unloaded (or is answered otherwise).
    await until(() => executions.length === 2, 2000, 'the bulk batch to reach the device');
    executions[1]!.release();
    await until(() => results.has('bulk'), 2000, 'the bulk result');
    expect(results.get('bulk')).toMatchObject([{ status: 'ok', version: '1' }]);
    await until(() => !h!.loaded.has('1'), 2000, 'version 1 to be unloaded once drained');
  });

  it('a version put back while it still drains serves again (rollback)', async () => {
    h = await startWorker(snapshotOf('1'));
    const { producer, executions, results, worker, loaded } = h;
    await producer.publish(request('a', 0));
    await until(() => executions.length === 1, 2000, 'a batch on version 1');
    // v2 is deployed while a batch runs on v1, then rolled back (v2 removed) before that batch ends.
    await worker.applySnapshot(snapshotOf('2'));
    await worker.applySnapshot(snapshotOf('1'));
    executions[0]!.release();
    await until(() => results.has('a'), 2000, 'result of a');
    await new Promise((r) => setTimeout(r, 50));
    expect(loaded.has('1')).toBe(true);
    await producer.publish(request('b', 0));
    await until(() => executions.length === 2, 2000, 'b on the device');
    executions[1]!.release();
    await until(() => results.has('b'), 2000, 'result of b');
    expect(results.get('b')).toMatchObject([{ status: 'ok', version: '1' }]);
  });

  it('a retiring version is unloaded even when its pinned requests expire instead of running', async () => {
    h = await startWorker(snapshotOf('1', '2'));
    const { producer, executions, results, worker, loaded } = h;
    await producer.publish(request('urgent', 0));
    await until(() => executions.length === 1, 2000, 'the urgent batch on the device');
    await producer.publish(request('urgent2', 0));
    await until(() => executions.length === 2, 2000, 'both device slots taken');
    // Pinned to v1, held behind the two batches, with a deadline it will miss.
    await producer.publish(request('pinned', 2, { version: '1', deadlineAt: Date.now() + 100 }));
    await new Promise((r) => setTimeout(r, 30));
    await worker.applySnapshot(snapshotOf('2'));
    await new Promise((r) => setTimeout(r, 150));
    executions[0]!.release();
    await until(() => results.has('pinned'), 2000, 'the pinned request to expire');
    expect(results.get('pinned')).toMatchObject([{ status: 'expired' }]);
    expect(executions).toHaveLength(2);
    await until(() => !loaded.has('1'), 2000, 'version 1 to be unloaded');
  });
});
