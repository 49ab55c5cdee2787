import { describe, expect, it } from 'vitest';
import { request, snapshotOf, startWorker, until } from './fake-device-worker.ts';

describe('urgent window', () => {
  it('is per device: after top-priority work, a bulk batch of another lane waits for the device to be idle instead of taking the second slot', async () => {
    const w = await startWorker(snapshotOf('1'));
    await w.producer.publish(request('urgent', 0));
    await until(() => w.executions.length === 1, 3000, 'the urgent batch on the device');
    w.executions[0]?.release();
    await until(() => w.results.has('urgent'), 3000, 'the urgent result');
    // Bulk work pinned to a version: its own lane, with no top-priority request of its own.
    await w.producer.publish(Array.from({ length: 64 }, (_, i) => request(`bulk-${i}`, 2, { version: '1' })));
    await until(() => w.executions.length === 2, 3000, 'the first bulk batch on the device');
    // Long past the device's expected finish time: only the urgent window keeps the second slot free.
    await new Promise((r) => setTimeout(r, 300));
    expect(w.executions.length).toBe(2);
    w.executions[1]?.release();
    await until(() => w.executions.length === 3, 3000, 'the second bulk batch once the device is idle');
    w.executions[2]?.release();
    await until(() => [...Array(64).keys()].every((i) => w.results.has(`bulk-${i}`)), 3000, 'every bulk result');
    await w.worker.drain(1000);
    await w.producer.close();
  }, 20_000);
});
