import { afterEach, describe, expect, it } from 'vitest';
import { workerReadiness, type HealthInputs } from '../../../src/runtime/worker-health.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { snapshotOf, startWorker, stopWorker, type WorkerHarness } from './fake-device-worker.ts';

const RUNNING: HealthInputs = { state: 'running', brokerConnected: true, failing: undefined, hangLimitMs: 60_000 };

/** A memory transport whose broker side says, when told to, what a Kafka one outside its group says. */
class ReasonedTransport extends MemoryTransport {
  outside: string | undefined;

  override connected(): boolean {
    return this.outside === undefined && super.connected();
  }

  unreadyReason(): string | undefined {
    return this.outside;
  }
}

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});

describe('workerReadiness: the broker side', () => {
  it("names the transport's reason when it gives one, else 'broker unreachable'", () => {
    expect(workerReadiness(RUNNING)).toEqual({ ready: true });
    expect(workerReadiness({ ...RUNNING, brokerConnected: false })).toEqual({ ready: false, reason: 'broker unreachable' });
    const reason = 'kafka request consumer outside its group since 2026-12-01T11:00:00.000Z (fetches answered, no heartbeat), restarting it';
    expect(workerReadiness({ ...RUNNING, brokerConnected: false, brokerUnreadyReason: reason })).toEqual({ ready: false, reason });
    // The worker's own state comes first: a draining worker says so, whatever its broker does.
    expect(workerReadiness({ ...RUNNING, state: 'draining', brokerConnected: false, brokerUnreadyReason: reason })).toEqual({ ready: false, reason: 'draining' });
  });

  it("a running worker's /readyz reason is its transport's while it is not connected, and ready again after", async () => {
    let transport: ReasonedTransport | undefined;
    h = await startWorker(snapshotOf('1'), {}, (broker) => (transport = new ReasonedTransport({ broker })));
    expect(h.worker.readiness()).toEqual({ ready: true });
    transport!.outside = 'kafka request consumer outside its group since 2026-12-01T11:00:00.000Z (fetches answered, no heartbeat), restarted, rejoining';
    expect(h.worker.readiness()).toEqual({ ready: false, reason: transport!.outside });
    transport!.outside = undefined;
    expect(h.worker.readiness()).toEqual({ ready: true });
  });
});
