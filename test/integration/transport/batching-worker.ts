import type { BullmqSettings } from '../../../src/contracts/fleet-config.ts';
import type { FleetError } from '../../../src/errors/fleet-error.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { uniqueName } from '../../helpers/unique-name.ts';
import { batchingDevice } from './batching-device.ts';
import { makeRequest } from './conformance-kit.ts';

/**
 * The Redis drills' worker: a BullmqTransport (stalled check every second, so jobs whose lock
 * lapsed in an outage come back soon) serving `model` (one priority level) through a
 * batchingDevice, and a producer on the same settings. Both are closed by `cleanup`.
 */
export async function startBatchingWorker(
  s: BullmqSettings,
  o: { model: string; batch: number; deviceMs: number; cleanup: Array<() => Promise<unknown> | void>; onFatal?: (err: FleetError) => void },
) {
  const transport = new BullmqTransport(s, { stalledIntervalMs: 1_000 });
  o.cleanup.push(() => transport.close());
  const device = batchingDevice(transport, o.batch, o.deviceMs);
  await transport.start({ subscriptions: [{ model: o.model, priorityLevels: 1 }], onDeliveries: device.onDeliveries, onFatal: o.onFatal });
  const producer = new BullmqProducer(s, { clientId: uniqueName(o.model) });
  o.cleanup.push(() => producer.close());
  return { device, producer };
}

/** Requests r0 … r(n-1) to `model`, all sent at once: each one's status, or `failed: <why>`. */
export function requestAll(producer: BullmqProducer, model: string, n: number, timeoutMs: number): Promise<string[]> {
  return Promise.all(
    Array.from({ length: n }, (_, i) =>
      producer.request(makeRequest(model, `r${i}`, 0), { timeoutMs }).then(
        (r) => r.status,
        (e: unknown) => `failed: ${(e as Error).message}`,
      ),
    ),
  );
}
