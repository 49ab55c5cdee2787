// Broker-side helpers for the BullMQ transport tests (real redis-server from the test services).
import { BullmqDeadLetters } from '../../../src/transport/bullmq/bullmq-dead-letters.ts';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { BullmqSettingsSchema, type BullmqSettings } from '../../../src/contracts/fleet-config.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { BullmqTransport, type BullmqTransportOptions } from '../../../src/transport/bullmq/bullmq-transport.ts';
import type { Transport } from '../../../src/transport/transport.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { sleep, type ConformanceHarness, type DlqEntry } from './conformance-kit.ts';

export function bullmqSettings(overrides: Partial<BullmqSettings> = {}): BullmqSettings {
  return BullmqSettingsSchema.parse({ redisUrl: getServices().redisUrl, prefix: uniqueName('conf'), lockDurationMs: 2_000, ...overrides });
}

/** Jobs of a queue in the given states, read straight from Redis. */
export async function queueJobs(settings: BullmqSettings, queue: string, states: Array<'wait' | 'prioritized' | 'completed' | 'active' | 'failed'>) {
  const q = new Queue(queue, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
  try {
    return await q.getJobs(states);
  } finally {
    await q.close();
  }
}

export async function bullmqHarness(transportOptions: BullmqTransportOptions = {}): Promise<ConformanceHarness> {
  const settings = bullmqSettings();
  // A reply queue whose event stream key holds a string: every add to it fails (WRONGTYPE).
  const unpublishable = uniqueName('conf-unpublishable');
  const redis = new Redis(settings.redisUrl);
  await redis.set(`${settings.prefix}:${unpublishable}:events`, 'not a stream');
  return {
    name: 'bullmq',
    createTransport: () => new BullmqTransport(settings, { stalledIntervalMs: 500, prefetch: 64, ...transportOptions }),
    createProducer: () => new BullmqProducer(settings),
    createDeadLetters: () => new BullmqDeadLetters(settings),
    deadLettersStay: false,
    crash: (t: Transport) => (t as BullmqTransport).abort(),
    async readDlq(model, count, timeoutMs): Promise<DlqEntry[]> {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const jobs = await queueJobs(settings, `${model}.dlq`, ['wait', 'prioritized']);
        if (jobs.length >= count || Date.now() > deadline) {
          return jobs.map((j) => ({ reason: String(j.data.reason), message: String(j.data.message), body: j.data.original as Record<string, unknown> }));
        }
        await sleep(50);
      }
    },
    unpublishableReplyTo: unpublishable,
    garbage: { hello: 'not a request' },
    redeliveryTimeoutMs: 15_000,
    exactRedelivery: true,
    redeliveredFlag: true,
    cleanup: async () => {
      redis.disconnect();
    },
  };
}
