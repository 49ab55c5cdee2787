import { afterEach, describe, expect, it } from 'vitest';
import { decodeRequest } from '../../../src/codec/index.ts';
import type { Delivery, TransportStartOptions } from '../../../src/transport/transport.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { request, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

/**
 * A memory transport that records each delivery by request id and lets the test revoke them, as a
 * Kafka rebalance does when a partition moves to another worker (KafkaTransport.onAssignment).
 */
class RevokingTransport extends MemoryTransport {
  readonly deliveries = new Map<string, Delivery[]>();
  private revokeFn: ((ids: ReadonlySet<string>) => void) | undefined;

  override async start(options: TransportStartOptions): Promise<void> {
    this.revokeFn = options.onRevoked;
    return super.start({
      ...options,
      onDeliveries: (ds) => {
        for (const d of ds) {
          const id = decodeRequest(d.body as Uint8Array).id;
          this.deliveries.set(id, [...(this.deliveries.get(id) ?? []), d]);
        }
        options.onDeliveries(ds);
      },
    });
  }

  /** Released after a revocation: gone with the partition (a memory broker would redeliver them here). */
  readonly releasedRevoked: string[] = [];
  private revokedIds = new Set<string>();

  revoke(deliveries: readonly Delivery[]): void {
    this.revokedIds = new Set(deliveries.map((d) => d.deliveryId));
    this.revokeFn?.(this.revokedIds);
  }

  override async release(deliveries: readonly Delivery[]): Promise<void> {
    const mine = deliveries.filter((d) => !this.revokedIds.has(d.deliveryId));
    for (const d of deliveries) if (this.revokedIds.has(d.deliveryId)) this.releasedRevoked.push(d.deliveryId);
    if (mine.length > 0) await super.release(mine);
  }
}

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});

const transportOf = (x: WorkerHarness): RevokingTransport => x.transport as unknown as RevokingTransport;

describe('deliveries revoked by a rebalance (their partition moved to another worker)', () => {
  it('queued ones are dropped unanswered and never reach the device; the rest are served', async () => {
    h = await startWorker(snapshotOf('1'), {}, (broker) => new RevokingTransport({ broker }));
    const { producer, executions, results, lines } = h;
    const t = transportOf(h);
    // Two batches fill the device's two slots; ten more queue behind them.
    await producer.publish(request('busy-0', 0));
    await until(() => executions.length === 1, 2000, 'first batch on the device');
    await producer.publish(request('busy-1', 0));
    await until(() => executions.length === 2, 2000, 'second batch on the device');
    const queued = Array.from({ length: 10 }, (_, i) => request(`q${i}`, 1));
    await producer.publish(queued);
    await until(() => queued.every((r) => t.deliveries.has(r.id)), 2000, 'the ten delivered');
    const revoked = queued.slice(0, 6).flatMap((r) => t.deliveries.get(r.id) ?? []);
    // busy-0 is on the device: revoking it does not stop it (its settle is the transport's to refuse).
    t.revoke([...revoked, ...(t.deliveries.get('busy-0') ?? [])]);
    expect(lines.find((l) => l.msg === 'rebalance: queued requests of partitions now owned by another worker dropped (it answers them)')).toMatchObject({ dropped: 6, revoked: 7 });
    for (let i = 0; i < 20 && results.size < 6; i++) {
      for (const e of executions) e.release();
      await new Promise((r) => setTimeout(r, 50));
    }
    await until(() => ['busy-0', 'busy-1', 'q6', 'q7', 'q8', 'q9'].every((id) => results.has(id)), 3000, 'the rest answered');
    await new Promise((r) => setTimeout(r, 200));
    for (const id of ['q0', 'q1', 'q2', 'q3', 'q4', 'q5']) expect(results.has(id), id).toBe(false);
    // Handed back to the transport, not left open: the dropped six, not busy-0 on the device.
    expect(t.releasedRevoked.sort()).toEqual(revoked.map((d) => d.deliveryId).sort());
    // What ran: the two busy batches and the four kept requests, not the six dropped ones.
    const served = await h.metrics.render();
    expect(served).toMatch(/npu_fleet_requests_total\{model="mlp-classifier",status="ok"\} 6\n/);
  });

  it('a request with a delivery that stays keeps being served for that one; with all revoked it is dropped', async () => {
    h = await startWorker(snapshotOf('1'), {}, (broker) => new RevokingTransport({ broker }));
    const { producer, executions, results } = h;
    const t = transportOf(h);
    await producer.publish(request('busy-0', 0));
    await until(() => executions.length === 1, 2000, 'first batch on the device');
    await producer.publish(request('busy-1', 0));
    await until(() => executions.length === 2, 2000, 'device slots full');
    // Each published twice: the second delivery rides along with the first (a redelivery).
    for (const id of ['kept', 'gone']) {
      await producer.publish(request(id, 1));
      await producer.publish(request(id, 1));
    }
    await until(() => t.deliveries.get('kept')?.length === 2 && t.deliveries.get('gone')?.length === 2, 2000, 'both delivered twice');
    const [keptFirst] = t.deliveries.get('kept') ?? [];
    t.revoke([keptFirst as Delivery, ...(t.deliveries.get('gone') ?? [])]);
    for (let i = 0; i < 20 && !results.has('kept'); i++) {
      for (const e of executions) e.release();
      await new Promise((r) => setTimeout(r, 50));
    }
    await until(() => results.has('kept'), 3000, 'kept answered');
    await new Promise((r) => setTimeout(r, 200));
    expect(results.has('gone')).toBe(false);
    // Both of gone's deliveries are handed back; of kept's, none (its first stays with the run).
    expect(t.releasedRevoked.sort()).toEqual((t.deliveries.get('gone') ?? []).map((d) => d.deliveryId).sort());
    // Its revoked first delivery is still settled by the memory transport (a Kafka transport refuses
    // it as not open); the rider that stayed is answered too.
    expect(results.get('kept')?.every((r) => r.status === 'ok')).toBe(true);
  });
});
