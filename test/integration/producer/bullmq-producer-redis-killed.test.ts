// BullMQ producer whose redis-server is SIGKILLed mid-run (a crashed host, an OOM-killed pod):
// publishing under load must not grow the connection's listener lists, and close() must be
// bounded by about one connectTimeoutMs, saying what it left behind. Own redis-server (killing the
// shared one would break every other test file).
import type { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import type { FleetError } from '../../../src/errors/fleet-error.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import type { TransportLogger } from '../../../src/transport/kafka/kafka-client.ts';
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

  it('close() returns within about one connectTimeoutMs, and logs what it left on Redis', async () => {
    const redis = await startKillableRedis(tempDir('npu-fleet-bullmq-killed-'));
    cleanup.push(() => redis.stop());
    const lines: Array<{ level: string; msg: string; fields: Record<string, unknown> }> = [];
    const logger: TransportLogger = {
      warn: (o, msg) => void lines.push({ level: 'warn', msg, fields: o as Record<string, unknown> }),
      info: (o, msg) => void lines.push({ level: 'info', msg, fields: o as Record<string, unknown> }),
      error: (o, msg) => void lines.push({ level: 'error', msg, fields: o as Record<string, unknown> }),
      debug: () => undefined,
    };
    const connectTimeoutMs = 4_000;
    const producer = new BullmqProducer({ ...bullmqSettings({ redisUrl: redis.url }), connectTimeoutMs }, { logger, clientId: uniqueName('closing') });
    cleanup.push(() => producer.close());
    const model = uniqueName('close-killed');
    // The inbox opens (its reply worker starts) and a subscription runs: both are for close() to end.
    const timedOut = await producer.request(makeRequest(model, 'unanswered', 0), { timeoutMs: 300 }).then(() => undefined, (e: unknown) => e as FleetError);
    expect(timedOut?.code).toBe('TIMEOUT');
    const replies = uniqueName('replies');
    await producer.subscribeReplies(replies, () => undefined);

    redis.kill();
    await new Promise((r) => setTimeout(r, 300));
    const startedAt = Date.now();
    await producer.close();
    const tookMs = Date.now() - startedAt;
    // Before: 2 x connectTimeoutMs and more (the reply workers, then the inbox queue, each waited the bound).
    expect(tookMs, JSON.stringify(lines.map((l) => l.msg))).toBeLessThan(connectTimeoutMs + 2_000);
    const leftBehind = lines.filter((l) => l.level === 'warn' && /left/.test(l.msg));
    expect(leftBehind.map((l) => l.fields.queue)).toEqual(expect.arrayContaining([producer.inbox]));
    expect(leftBehind.map((l) => l.msg).join('\n')).toMatch(/obliterate/);
    // The reply workers were dropped, not closed with Redis: said too, per queue.
    const dropped = lines.filter((l) => l.level === 'warn' && /closed a reply worker without waiting for Redis/.test(l.msg)).map((l) => l.fields.queue);
    expect(dropped.sort()).toEqual([producer.inbox, replies].sort());
  }, 40_000);

  it('close() with Redis frozen (SIGSTOP: connections up, nothing answers) also returns within about one connectTimeoutMs', async () => {
    const redis = await startKillableRedis(tempDir('npu-fleet-bullmq-frozen-'));
    cleanup.push(() => redis.stop());
    const left: string[] = [];
    const logger: TransportLogger = { warn: (_o, msg) => void left.push(msg), info: () => undefined, error: () => undefined, debug: () => undefined };
    const connectTimeoutMs = 3_000;
    const producer = new BullmqProducer({ ...bullmqSettings({ redisUrl: redis.url }), connectTimeoutMs }, { logger, clientId: uniqueName('frozen') });
    cleanup.push(() => producer.close());
    const timedOut = await producer.request(makeRequest(uniqueName('close-frozen'), 'unanswered', 0), { timeoutMs: 300 }).then(() => undefined, (e: unknown) => e as FleetError);
    expect(timedOut?.code).toBe('TIMEOUT');

    redis.freeze();
    const startedAt = Date.now();
    await producer.close();
    const tookMs = Date.now() - startedAt;
    expect(tookMs, JSON.stringify(left)).toBeLessThan(connectTimeoutMs + 2_000);
    expect(left.join('\n')).toMatch(new RegExp(`left the inbox queue ${producer.inbox.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
  }, 40_000);
});
