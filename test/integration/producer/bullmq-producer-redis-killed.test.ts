// BullMQ producer whose redis-server is SIGKILLed mid-run (a crashed host, an OOM-killed pod):
// publishing under load must not grow the connection's listener lists, and close() must be
// bounded by about one connectTimeoutMs, saying what it left behind. Own redis-server (killing the
// shared one would break every other test file).
import type { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { startKillableRedis } from '../../helpers/killable-redis.ts';
import { uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { bullmqSettings } from '../transport/bullmq-harness.ts';
import { makeRequest } from '../transport/conformance-kit.ts';

const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => undefined);
});

/** The producer's own connection (queues, reach): the one whose listeners piled up. */
const connectionOf = (producer: BullmqProducer): Redis => {
  const connection = (producer as unknown as { connection: Redis | undefined }).connection;
  if (connection === undefined) throw new Error('the producer has no connection yet');
  return connection;
};

describe('bullmq producer with its redis-server SIGKILLed', () => {
  it("publishing while Redis is away adds no 'close'/'ready' listeners per publish, and no MaxListenersExceededWarning", async () => {
    const redis = await startKillableRedis(tempDir('npu-fleet-bullmq-killed-'));
    cleanup.push(() => redis.stop());
    const warnings: Error[] = [];
    const onWarning = (w: Error): void => void warnings.push(w);
    process.on('warning', onWarning);
    cleanup.push(async () => void process.off('warning', onWarning));
    const model = uniqueName('listeners');
    const producer = new BullmqProducer({ ...bullmqSettings({ redisUrl: redis.url }), connectTimeoutMs: 3_000 });
    cleanup.push(() => producer.close());
    await producer.publish(makeRequest(model, 'before', 0));
    const connection = connectionOf(producer);
    const before = { close: connection.listenerCount('close'), ready: connection.listenerCount('ready') };

    redis.kill();
    // As under `npu-fleet load`: publishes keep coming while the earlier ones wait for Redis.
    const N = 40;
    const pending: Array<Promise<unknown>> = [];
    for (let i = 0; i < N; i++) {
      pending.push(producer.publish(makeRequest(model, `during-${i}`, 0)).then(() => 'published', (e: unknown) => e));
      await new Promise((r) => setTimeout(r, 10));
    }
    const during = { close: connection.listenerCount('close'), ready: connection.listenerCount('ready') };
    const outcomes = await Promise.all(pending);
    const after = { close: connection.listenerCount('close'), ready: connection.listenerCount('ready') };

    // Before the fix: during = before + 40 of each (one pair per publish waiting for Redis).
    expect({ before, during, after }).toEqual({ before, during: { close: before.close + 1, ready: before.ready + 1 }, after: before });
    expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning').map((w) => w.message)).toEqual([]);
    expect(outcomes.every((o) => (o as { code?: unknown }).code === 'TRANSPORT_ERROR')).toBe(true);
  }, 40_000);
});
