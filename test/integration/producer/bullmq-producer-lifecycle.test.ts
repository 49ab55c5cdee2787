// BullMQ producer lifecycle against a real Redis: request() after Redis was away at the first
// call, close() while Redis is away, close() racing a request() that is still opening its inbox.
import { createServer, connect, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { uniqueName } from '../../helpers/services.ts';
import { bullmqSettings, lateRedis, queueJobs } from '../transport/bullmq-harness.ts';
import { makeRequest, outcomeFor } from '../transport/conformance-kit.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});

const failure = (p: Promise<unknown>): Promise<unknown> => p.then(() => undefined, (e: unknown) => e);

describe('bullmq producer lifecycle', () => {
  it('close() returns promptly after a request() that failed because Redis did not answer', async () => {
    const producer = new BullmqProducer(bullmqSettings({ redisUrl: 'redis://127.0.0.1:1', connectTimeoutMs: 500 }));
    const err = await failure(producer.request(makeRequest('m', 'r-1', 0), { timeoutMs: 1_000 }));
    expect((err as FleetError).code).toBe('TRANSPORT_ERROR');
    const startedAt = Date.now();
    const closed = await Promise.race([producer.close().then(() => 'closed'), new Promise((r) => setTimeout(() => r('hung'), 5_000))]);
    expect(closed).toBe('closed');
    expect(Date.now() - startedAt).toBeLessThan(5_000);
  });

  it('request() works once Redis answers, after a first request() found it away', async () => {
    const base = bullmqSettings();
    const late = await lateRedis(base.redisUrl);
    const settings = { ...base, redisUrl: late.url, connectTimeoutMs: 500 };
    const model = uniqueName('late');
    const producer = new BullmqProducer(settings);
    const t = new BullmqTransport(base);
    try {
      expect(((await failure(producer.request(makeRequest(model, 'early', 0), { timeoutMs: 1_000 }))) as FleetError).code).toBe('TRANSPORT_ERROR');
      await late.up();
      await t.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void t.settle(ds.map(outcomeFor)) });
      const reply = await producer.request(makeRequest(model, 'later', 0), { timeoutMs: 10_000 });
      expect(reply.id).toBe('later');
    } finally {
      // Redis (the proxy) last: closing clients talk to it.
      await Promise.allSettled([producer.close(), t.close()]);
      await late.close();
    }
  });

  it('close() returns promptly when Redis went away after request() opened the inbox', async () => {
    const base = bullmqSettings();
    const late = await lateRedis(base.redisUrl);
    open.push(late);
    await late.up();
    const model = uniqueName('gone');
    const producer = new BullmqProducer({ ...base, redisUrl: late.url, connectTimeoutMs: 500 });
    const t = new BullmqTransport(base);
    open.push(t);
    await t.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void t.settle(ds.map(outcomeFor)) });
    expect((await producer.request(makeRequest(model, 'before', 0), { timeoutMs: 10_000 })).id).toBe('before');
    await late.close();
    const startedAt = Date.now();
    const closed = await Promise.race([producer.close().then(() => 'closed'), new Promise((r) => setTimeout(() => r('hung'), 10_000))]);
    expect(closed).toBe('closed');
    expect(Date.now() - startedAt).toBeLessThan(10_000);
  });

  it('close() called while a request() opens its inbox leaves no reply connection behind', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('race');
    const admin = new Redis(settings.redisUrl);
    const replyConnections = async (): Promise<number> =>
      String(await admin.client('LIST'))
        .split('\n')
        .filter((l) => l.includes(`name=npu-fleet-replies:${settings.prefix}:`)).length;
    try {
      const producer = new BullmqProducer(settings);
      open.push(producer);
      await producer.publish(makeRequest(model, 'warm-up', 0)); // Redis reached: the next listen does not wait for it
      const pending = failure(producer.request(makeRequest(model, 'raced', 0), { timeoutMs: 5_000 }));
      await producer.close();
      expect(((await pending) as FleetError).code).toBe('CLOSED');
      const deadline = Date.now() + 3_000;
      while ((await replyConnections()) > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(await replyConnections()).toBe(0);
    } finally {
      admin.disconnect();
    }
  });

  it('a request() or publish() made while close() is under way is refused with CLOSED and sends nothing', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('closing');
    const producer = new BullmqProducer(settings);
    open.push(producer);
    // The inbox is open (its reply worker started): closing it takes a moment.
    expect(((await failure(producer.request(makeRequest(model, 'first', 0), { timeoutMs: 200 }))) as FleetError).code).toBe('TIMEOUT');
    const closing = producer.close();
    const startedAt = Date.now();
    const late = failure(producer.request(makeRequest(model, 'late', 0), { timeoutMs: 10_000 }));
    const published = failure(producer.publish(makeRequest(model, 'late-publish', 0)));
    await closing;
    // Before: published after close() began, then a TIMEOUT 10 s later (the reply, if any, re-created the removed inbox queue).
    expect(((await late) as FleetError).code).toBe('CLOSED');
    expect(((await published) as FleetError).code).toBe('CLOSED');
    expect(Date.now() - startedAt).toBeLessThan(5_000);
    const queued = await queueJobs(settings, settings.queueTemplate.replace('{model}', model), ['wait', 'prioritized']);
    expect(queued.map((j) => j.id).sort()).toEqual(['first']);
  });

  it('request() settles within its timeoutMs when Redis stops answering new connections after the first publish', async () => {
    const settings = bullmqSettings();
    const target = new URL(settings.redisUrl);
    // Forwards to Redis until `blackhole`; then takes connections and answers nothing (a Redis
    // failing over, a proxy or firewall dropping traffic), where ioredis waits forever.
    let blackhole = false;
    const sockets = new Set<Socket>();
    const proxy = createServer((client) => {
      sockets.add(client);
      client.on('error', () => undefined);
      if (blackhole) return;
      const upstream = connect(Number(target.port || 6379), target.hostname);
      sockets.add(upstream);
      upstream.on('error', () => undefined);
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    open.push({ close: async () => { for (const s of sockets) s.destroy(); await new Promise<void>((r) => proxy.close(() => r())); } });
    const producer = new BullmqProducer({ ...settings, redisUrl: `redis://127.0.0.1:${(proxy.address() as { port: number }).port}`, connectTimeoutMs: 500 });
    const model = uniqueName('blackhole');
    await producer.publish(makeRequest(model, 'warm-up', 0)); // Redis reached through the proxy
    blackhole = true;
    const startedAt = Date.now();
    const outcome = await Promise.race([
      failure(producer.request(makeRequest(model, 'stuck', 0), { timeoutMs: 1_000 })),
      new Promise((r) => setTimeout(() => r('still waiting after 10 s'), 10_000)),
    ]);
    expect(outcome).toBeInstanceOf(FleetError);
    expect((outcome as FleetError).code).toBe('TIMEOUT');
    expect(Date.now() - startedAt).toBeLessThan(3_000);
    const closed = await Promise.race([producer.close().then(() => 'closed'), new Promise((r) => setTimeout(() => r('hung'), 10_000))]);
    expect(closed).toBe('closed');
  }, 40_000);
});
