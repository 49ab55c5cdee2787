import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeRequest } from '../../../src/codec/index.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { DeviceWorker } from '../../../src/runtime/device-worker.ts';
import { InflightJournal, readInflightJournal } from '../../../src/runtime/inflight-journal.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import type { TransportStartOptions } from '../../../src/transport/transport.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { MODEL, controlledDevice, request, snapshotOf, until } from './fake-device-worker.ts';

/** Delivers request "poison" as the broker would after it was on a device that hung once. */
class SuspectTransport extends MemoryTransport {
  override start(options: TransportStartOptions): Promise<void> {
    return super.start({
      ...options,
      onDeliveries: (ds) => options.onDeliveries(ds.map((d) => (d.body instanceof Uint8Array && decodeRequest(d.body).id === 'poison' ? { ...d, redelivered: true, suspectCount: 1 } : d))),
    });
  }
}

describe('a suspect on the device', () => {
  let cleanup: () => Promise<void> = () => Promise.resolve();
  afterEach(() => cleanup());

  it('does not start on the device while another batch is still on it: a crash then blames it alone', async () => {
    const dev = controlledDevice();
    const broker = new MemoryBroker();
    const journal = new InflightJournal(join(tempDir('npu-fleet-suspect-alone-'), 'j.inflight.json'));
    const config = parseFleetConfig({ devices: { count: 1, backend: 'sim' }, models: [MODEL], worker: { metricsPort: 0 } });
    const worker = new DeviceWorker({ config, deviceId: 0, device: dev.device, transport: new SuspectTransport({ broker }), metrics: new FleetMetrics({ processMetrics: false }), log: createLogger({ level: 'silent' }), snapshot: snapshotOf('1'), journal });
    const producer = new MemoryProducer({ broker });
    cleanup = async () => {
      for (const e of dev.executions) e.release();
      await worker.close();
      await producer.close();
      journal.close();
    };
    await worker.start();
    await producer.publish(request('innocent', 1));
    await until(() => dev.executions.length === 1, 3000, 'the first batch on the device');
    await producer.publish(request('poison', 1));
    // Long enough for the worker to dispatch the suspect behind the first batch (the device looks free by its estimate).
    await new Promise((r) => setTimeout(r, 300));
    const journaled = (readInflightJournal(journal.path) as { batches: Array<Array<[string, number]>> }).batches;
    // Were the process to die now, the journal must not blame the innocent request with the suspect.
    expect(dev.executions).toHaveLength(1);
    expect(journaled.some((b) => b.some(([, count]) => count > 0)) && journaled.length > 1).toBe(false);
    dev.executions[0]?.release();
    await until(() => dev.executions.length === 2, 3000, 'the suspect on the device once the first left');
  });
});
