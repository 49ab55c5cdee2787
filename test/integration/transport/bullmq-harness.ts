// Broker-side helpers for the BullMQ transport tests (real redis-server from the test services).
import { connect, createServer, type Server, type Socket } from 'node:net';
import { BullmqDeadLetters } from '../../../src/transport/bullmq/bullmq-dead-letters.ts';
import { Queue, Worker } from 'bullmq';
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

/** A port with nothing listening yet; `up()` then forwards it to the real Redis. */
export async function lateRedis(redisUrl: string): Promise<{ url: string; up(): Promise<void>; close(): Promise<void> }> {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const port = (probe.address() as { port: number }).port;
  await new Promise<void>((r) => probe.close(() => r()));
  const target = new URL(redisUrl);
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  return {
    url: `redis://127.0.0.1:${port}`,
    up: async () => {
      server = createServer((client) => {
        const upstream = connect(Number(target.port || 6379), target.hostname);
        for (const s of [client, upstream]) {
          sockets.add(s);
          s.on('error', () => undefined);
          s.on('close', () => sockets.delete(s));
        }
        client.pipe(upstream).pipe(client);
      });
      await new Promise<void>((r) => server!.listen(port, '127.0.0.1', r));
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => (server === undefined ? r() : server.close(() => r())));
    },
  };
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

/**
 * The ids of a queue's next `count` jobs in the order BullMQ's own fetch serves them (each taken
 * active under a throwaway token: the queue is spent afterwards).
 */
export async function servedOrder(settings: BullmqSettings, queue: string, count: number): Promise<string[]> {
  const raw = new Worker(queue, null, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
  try {
    const ids: string[] = [];
    for (let i = 0; i < count; i++) {
      const job = await raw.getNextJob(`served-order:${i}`, { block: false });
      if (job?.id === undefined) break;
      ids.push(job.id);
    }
    return ids;
  } finally {
    await raw.close(true);
  }
}
