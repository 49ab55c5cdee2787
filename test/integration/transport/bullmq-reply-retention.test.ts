// What answering leaves in Redis must stay bounded: every reply queue a worker answered on (not
// only the model's default one) is swept of results older than replyTtlMs, one nobody has been
// answered on for longer is forgotten with its leftover keys, and an answered request job keeps
// its result but not a large input. Real Redis.
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { ReplyQueues } from '../../../src/transport/bullmq/reply-queues.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { bullmqSettings } from './bullmq-harness.ts';
import { makeRequest, outcomeFor, ResultSink, sleep } from './conformance-kit.ts';

const track = closeAfterEach();

/** Keys under a queue's BullMQ prefix. */
async function keysOf(redis: Redis, prefix: string, queue: string): Promise<string[]> {
  const out: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:${queue}:*`, 'COUNT', 1_000);
    cursor = next;
    out.push(...keys);
  } while (cursor !== '0');
  return out;
}

async function until(what: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await what()) && Date.now() < deadline) await sleep(100);
}

describe('bullmq reply retention', () => {
  it("results nobody reads on a request's own replyTo queue are removed after replyTtlMs; the queue is then forgotten and leaves no keys", async () => {
    const settings = bullmqSettings({ replyTtlMs: 1_000 });
    const model = uniqueName('unread');
    const unread = `${model}.gone-client-inbox`;
    const producer = track(new BullmqProducer(settings));
    const t = track(new BullmqTransport(settings));
    await t.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void t.settle(ds.map(outcomeFor)) });
    const admin = new Redis(settings.redisUrl);
    try {
      await producer.publish(Array.from({ length: 200 }, (_, i) => makeRequest(model, `r${i}`, 0, { replyTo: unread })));
      const waiting = (): Promise<number> => admin.llen(`${settings.prefix}:${unread}:wait`);
      await until(async () => (await waiting()) === 200, 10_000);
      expect(await waiting()).toBe(200);
      // Past the TTL (1 s) the sweep (every 0.5 s) removes them.
      await until(async () => (await waiting()) === 0, 5_000);
      expect(await waiting()).toBe(0);
      // Nothing answered there for longer than the TTL: nothing of the queue is left.
      await until(async () => (await keysOf(admin, settings.prefix, unread)).length === 0, 5_000);
      expect(await keysOf(admin, settings.prefix, unread)).toEqual([]);
    } finally {
      admin.disconnect();
    }
  }, 30_000);

  it('a reader of its own reply queue still gets results answered there after its idle queue was forgotten', async () => {
    const settings = bullmqSettings({ replyTtlMs: 1_000 });
    const model = uniqueName('reader');
    const replyTo = `${model}.live-inbox`;
    const producer = track(new BullmqProducer(settings));
    const sink = new ResultSink();
    await producer.subscribeReplies(replyTo, sink.onResult);
    const t = track(new BullmqTransport(settings));
    await t.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void t.settle(ds.map(outcomeFor)) });
    const admin = new Redis(settings.redisUrl);
    try {
      await producer.publish(makeRequest(model, 'first', 0, { replyTo }));
      await sink.waitFor(1, 10_000);
      // The result taken is kept an hour (KEEP_COMPLETED); as if that hour had passed:
      const inbox = new Queue(replyTo, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
      try {
        expect(await inbox.clean(0, 10, 'completed')).toHaveLength(1);
      } finally {
        await inbox.close();
      }
      // Idle past the TTL: forgotten (its bookkeeping keys deleted under the live reader).
      const registry = `${settings.prefix}:${model}.requests:npu-fleet-reply-queues`;
      expect(await admin.zscore(registry, replyTo)).not.toBeNull();
      await until(async () => (await admin.zscore(registry, replyTo)) === null, 8_000);
      expect(await admin.zscore(registry, replyTo)).toBeNull();
      await producer.publish(makeRequest(model, 'second', 0, { replyTo }));
      expect((await sink.waitFor(2, 10_000)).map((r) => r.id)).toEqual(['first', 'second']);
      // Answered on again: noted again, so swept again.
      expect(await admin.zscore(registry, replyTo)).not.toBeNull();
    } finally {
      admin.disconnect();
    }
  }, 30_000);

  it("results a reader took and then went away from are removed once older than their retention, and the queue is forgotten", async () => {
    const settings = bullmqSettings();
    const queue = uniqueName('taken-inbox');
    const connection = { url: settings.redisUrl } as never;
    const q = new Queue(queue, { connection, prefix: settings.prefix });
    const admin = new Redis(settings.redisUrl);
    const registry = `${settings.prefix}:m.requests:npu-fleet-reply-queues`;
    try {
      await q.addBulk(['a', 'b', 'c'].map((id) => ({ name: 'result', data: { id }, opts: { jobId: id, removeOnComplete: { age: 3_600 } } })));
      // The reader takes them and is gone: its results stay completed (age applies at the next completion only).
      const reader = new Worker(queue, async () => undefined, { connection, prefix: settings.prefix });
      await until(async () => (await admin.zcard(`${settings.prefix}:${queue}:completed`)) === 3, 10_000);
      await reader.close();
      const replyQueues = new ReplyQueues({
        redis: () => admin,
        prefix: settings.prefix,
        registryKey: () => registry,
        claimKey: () => `${settings.prefix}:m.requests:npu-fleet-reply-sweep`,
        defaultQueue: () => 'm.replies',
        ttlMs: 1_000,
        keepCompletedMs: 200,
        clean: async (name, graceMs, limit, state) => (await q.clean(graceMs, limit, state)).length,
      });
      await replyQueues.note('m', [queue], Date.now() - 10_000);
      await sleep(300);
      await replyQueues.sweep(['m'], 1_000);
      expect(await keysOf(admin, settings.prefix, queue)).toEqual([]);
      expect(await admin.zscore(registry, queue)).toBeNull();
    } finally {
      await q.close();
      admin.disconnect();
    }
  });

  it('an answered request job keeps its return value and a small input, but not an input over 4 KiB; asking again still gets the answer', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('inputs');
    const queue = `${model}.requests`;
    const producer = track(new BullmqProducer(settings));
    const t = track(new BullmqTransport(settings));
    await t.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void t.settle(ds.map(outcomeFor)) });
    // A 3x224x224 float32 image (588 KiB, about 800 KB as JSON) and a small request.
    const image = { name: 'x', dtype: 'float32' as const, shape: [1, 3, 224, 224], data: new Uint8Array(3 * 224 * 224 * 4) };
    const big = makeRequest(model, 'image', 0, { inputs: [image] });
    const [answer] = await Promise.all([producer.request(big, { timeoutMs: 10_000 }), producer.request(makeRequest(model, 'small', 0), { timeoutMs: 10_000 })]);
    const admin = new Redis(settings.redisUrl);
    try {
      const field = (id: string, name: string): Promise<number> => admin.hstrlen(`${settings.prefix}:${queue}:${id}`, name);
      await until(async () => (await field('image', 'data')) < 4_096, 5_000);
      expect(await field('image', 'data')).toBeLessThan(4_096);
      expect(JSON.parse((await admin.hget(`${settings.prefix}:${queue}:image`, 'data')) ?? '')).toMatchObject({ inputRemoved: expect.stringMatching(/answered/) });
      expect(await field('image', 'returnvalue')).toBeGreaterThan(0);
      expect(await field('small', 'data')).toBeGreaterThan(100);
      expect(JSON.parse((await admin.hget(`${settings.prefix}:${queue}:small`, 'data')) ?? '')).toMatchObject({ id: 'small' });
    } finally {
      admin.disconnect();
    }
    // The job stays (a publish of the id is still dropped) and its answer is still given.
    const again = await producer.request(big, { timeoutMs: 10_000 });
    expect(again).toEqual(answer);
  });
});
