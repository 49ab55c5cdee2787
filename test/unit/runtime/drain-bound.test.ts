import { afterEach, describe, expect, it } from 'vitest';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { request, snapshotOf, startWorker, until } from './fake-device-worker.ts';

type Harness = Awaited<ReturnType<typeof startWorker>>;
let h: Harness | undefined;
afterEach(async () => {
  for (const e of h?.executions ?? []) e.release();
  await h?.producer.close();
  h = undefined;
});

/** A broker that does not answer the request to stop intake (e.g. Redis paused mid-drain). */
class StuckStopTransport extends MemoryTransport {
  override stopIntake(): Promise<void> {
    return new Promise(() => undefined);
  }
}

describe('DeviceWorker.drain is bounded by its timeout', () => {
  it('returns within the drain timeout when stopping intake never completes', async () => {
    h = await startWorker(snapshotOf('1'), {}, (broker) => new StuckStopTransport({ broker }));
    const { producer, executions, worker } = h;
    await producer.publish(request('on-device', 0));
    await until(() => executions.length === 1, 2000, 'a batch on the device');
    const startedAt = Date.now();
    const outcome = await Promise.race([worker.drain(300), new Promise<'hung'>((r) => setTimeout(() => r('hung'), 3000))]);
    expect(outcome).not.toBe('hung');
    expect(Date.now() - startedAt).toBeLessThan(1500);
  });
});
