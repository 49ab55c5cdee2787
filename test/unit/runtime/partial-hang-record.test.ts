import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { CrashSuspects } from '../../../src/runtime/crash-suspects.ts';
import { DeviceWorker } from '../../../src/runtime/device-worker.ts';
import { InflightJournal } from '../../../src/runtime/inflight-journal.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import type { Delivery } from '../../../src/transport/transport.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { MODEL, controlledDevice, request, snapshotOf, until } from './fake-device-worker.ts';

const log = createLogger({ level: 'silent' });

/** As Kafka does when some of the hung batch's partitions were revoked: records the ones it holds, answers false. */
class HalfRecordingTransport extends MemoryTransport {
  readonly hung: Delivery[] = [];
  override async markSuspect(deliveries: readonly Delivery[]): Promise<boolean> {
    this.hung.push(...deliveries);
    await super.markSuspect(deliveries.slice(0, 1));
    return deliveries.length <= 1;
  }
}

describe('a hang the broker recorded for only some of the hung batch', () => {
  let cleanup: () => Promise<void> = () => Promise.resolve();
  afterEach(() => cleanup());

  it('each request of the batch counts that hang once: recorded by the broker or through the journal, not both', async () => {
    const dev = controlledDevice();
    const broker = new MemoryBroker();
    const transport = new HalfRecordingTransport({ broker });
    const journal = new InflightJournal(join(tempDir('npu-fleet-half-hang-'), 'j.inflight.json'));
    const config = parseFleetConfig({ devices: { count: 1, backend: 'sim' }, models: [MODEL], worker: { metricsPort: 0, hangLimitMs: 200 } });
    const producer = new MemoryProducer({ broker });
    // Both waiting before the worker starts: they go to the device in one batch.
    await producer.publish(request('poison', 1));
    await producer.publish(request('innocent', 1));
    const worker = new DeviceWorker({ config, deviceId: 0, device: dev.device, transport, metrics: new FleetMetrics({ processMetrics: false }), log, snapshot: snapshotOf('1'), journal });
    cleanup = async () => {
      for (const e of dev.executions) e.release();
      await worker.close();
      await producer.close();
    };
    await worker.start();
    await until(() => worker.status === 'hung', 5000, 'the hang');
    await worker.hangRecorded;
    expect(transport.hung).toHaveLength(2); // one batch of two hung
    journal.close();

    // The next worker of this device: the broker holds the hang for the first, the journal for both.
    const hints = new InflightJournal(journal.path).takeCrashHints();
    const marked: string[] = [];
    const next = new CrashSuspects({ hints, transport: { markSuspect: (ds) => (marked.push(...ds.map((d) => d.deliveryId)), Promise.resolve(true)) }, log });
    const counts = await Promise.all(
      transport.hung.map(async (d) => {
        const back = { ...d, redelivered: true, suspectCount: broker.suspectCount(d.deliveryId) };
        return (await (next.take(back) ?? Promise.resolve(back))).suspectCount;
      }),
    );
    // One hang each: with worker.maxHangsPerRequest 2, neither is quarantined yet.
    expect(counts).toEqual([1, 1]);
    // Only the one the broker did not record is recorded now.
    expect(marked).toEqual([transport.hung[1]?.deliveryId]);
  });
});
