// KafkaProducer.request() when its private inbox cannot be opened at first (broker not reachable).
import { createServer, connect, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { createTransport } from '../../../src/transport/index.ts';
import type { Transport } from '../../../src/transport/transport.ts';
import { freePort } from '../../helpers/service-process.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { makeRequest, outcomeFor } from '../transport/conformance-kit.ts';
import { adminKafka, kafkaSettings } from '../transport/kafka-harness.ts';

/** A TCP forwarder to the test broker on `port`: the producer bootstraps through it (metadata then names the real broker). */
async function forwarder(port: number): Promise<{ close(): Promise<void> }> {
  const [host, brokerPort] = (getServices().kafkaBrokers[0] as string).split(':') as [string, string];
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(Number(brokerPort), host);
    sockets.add(client).add(upstream);
    client.pipe(upstream).pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
  });
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  return {
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});

describe('kafka producer request() while the broker is not reachable yet', () => {
  it('fails within its timeoutMs, and a later request() once the broker answers opens the inbox and gets its reply', async () => {
    const model = uniqueName('inbox');
    const port = await freePort();
    const producer = new KafkaProducer(kafkaSettings({ brokers: [`127.0.0.1:${port}`] }), { partitions: 2 });
    open.push(producer);

    const startedAt = Date.now();
    const first = await producer.request(makeRequest(model, 'r1', 0), { timeoutMs: 1_000 }).catch((e: unknown) => e);
    const tookMs = Date.now() - startedAt;
    expect(first).toBeInstanceOf(FleetError);
    expect(tookMs, 'the timeout bounds the whole request, opening the inbox included').toBeLessThan(3_000);

    open.push(await forwarder(port));
    const worker: Transport = createTransport({ kind: 'kafka', kafka: kafkaSettings() }, { kafka: { partitions: 2 } });
    open.push(worker);
    await worker.start({
      subscriptions: [{ model, priorityLevels: 1 }],
      onDeliveries: (ds) => void worker.settle(ds.map(outcomeFor)),
    });
    const second = await producer.request(makeRequest(model, 'r2', 0), { timeoutMs: 30_000 });
    expect(second.id).toBe('r2');
  }, 90_000);
});

describe('kafka producer close() while request() is still opening the inbox', () => {
  it('leaves neither the inbox topic nor a consumer of it behind', async () => {
    const model = uniqueName('closing');
    const producer = new KafkaProducer(kafkaSettings(), { partitions: 2 });
    const pending = producer.request(makeRequest(model, 'c1', 0), { timeoutMs: 30_000 }).catch((e: unknown) => e);
    // Let the opening get under way (connecting, creating the topic), then close.
    await new Promise((r) => setTimeout(r, 50));
    await producer.close();
    expect(await pending).toBeInstanceOf(FleetError);
    // Whatever the opening was doing when close() ran has finished by now.
    await new Promise((r) => setTimeout(r, 8_000));
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      expect(await admin.listTopics()).not.toContain(producer.inbox);
      const { groups } = await admin.describeGroups([`${producer.inbox}.group`]);
      expect(groups[0]?.members ?? [], 'a consumer of the inbox still runs after close()').toHaveLength(0);
    } finally {
      await admin.disconnect();
    }
  }, 60_000);
});

describe('kafka producer close() called twice (a signal handler and a finally block)', () => {
  it('the second call resolves only once the first has removed the inbox topic and group', async () => {
    const model = uniqueName('twice');
    const producer = new KafkaProducer(kafkaSettings(), { partitions: 1 });
    const worker: Transport = createTransport({ kind: 'kafka', kafka: kafkaSettings() }, { kafka: { partitions: 1 } });
    open.push(worker);
    await worker.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void worker.settle(ds.map(outcomeFor)) });
    expect((await producer.request(makeRequest(model, 't1', 0), { timeoutMs: 30_000 })).id).toBe('t1');
    void producer.close();
    // The caller of the second close() goes on to exit the process: the inbox must be gone by then.
    await producer.close();
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      expect(await admin.listTopics(), 'the inbox topic is still there when close() resolved').not.toContain(producer.inbox);
    } finally {
      await admin.disconnect();
    }
  }, 90_000);
});

describe('kafka producer close() while request() waits for its inbox to open (broker not reachable)', () => {
  it('the waiting request() settles with CLOSED at once, not when the opening gives up or its timeout passes', async () => {
    const model = uniqueName('close-opening');
    const port = await freePort();
    const producer = new KafkaProducer(kafkaSettings({ brokers: [`127.0.0.1:${port}`] }), { partitions: 1 });
    open.push(producer);
    const startedAt = Date.now();
    let settledAt = 0;
    const pending = producer.request(makeRequest(model, 'w1', 0), { timeoutMs: 60_000 }).catch((e: unknown) => {
      settledAt = Date.now();
      return e;
    });
    // The opening retries the connection meanwhile (kafkajs backoff, about 16 s in all).
    await new Promise((r) => setTimeout(r, 500));
    const closedAt = Date.now();
    void producer.close();
    const error = await pending;
    expect(FleetError.is(error, 'CLOSED'), `settled with ${String(error)}`).toBe(true);
    expect(settledAt - closedAt, `settled ${settledAt - closedAt} ms after close() (${settledAt - startedAt} ms after the call)`).toBeLessThan(1_000);
  }, 90_000);
});

describe('kafka producer request() timing out on a fresh producer', () => {
  it('names the timeoutMs the caller set, though part of it went to opening the inbox', async () => {
    const settings = kafkaSettings();
    const producer = new KafkaProducer(settings, { partitions: 1 });
    open.push(producer);
    // No worker serves this model: the request times out.
    const model = uniqueName('unserved');
    const error = await producer.request(makeRequest(model, 'late1', 0), { timeoutMs: 4_000 }).catch((e: unknown) => e);
    expect(FleetError.is(error, 'TIMEOUT'), `settled with ${String(error)}`).toBe(true);
    // The caller's timeoutMs, then the model and how to see whether any worker reads its topic.
    expect((error as FleetError).message).toBe(
      `no reply for request "late1" within 4000 ms: the fleet may be backed up (raise timeoutMs), or no worker may serve model "${model}" ` +
        `(check that the fleet config's models lists it and that members of the workers' consumer group ${settings.groupId} read ${model}.requests.p* (the topic of the request's priority): ` +
        `kafka-consumer-groups.sh --describe --group ${settings.groupId})`,
    );
    expect((error as FleetError).details).toMatchObject({ timeoutMs: 4_000, model });
  }, 60_000);
});

describe('kafka producer told the served models', () => {
  it('refuses a request() and a publish() for another model at once and creates no topic for it', async () => {
    const served = uniqueName('served');
    const typo = uniqueName('typo');
    const producer = new KafkaProducer(kafkaSettings(), { partitions: 1, models: [served] });
    open.push(producer);
    const startedAt = Date.now();
    const requested = await producer.request(makeRequest(typo, 'u1', 0), { timeoutMs: 30_000 }).catch((e: unknown) => e);
    expect(FleetError.is(requested, 'UNKNOWN_MODEL'), `settled with ${String(requested)}`).toBe(true);
    expect(Date.now() - startedAt).toBeLessThan(1_000);
    const published = await producer.publish([makeRequest(served, 's1', 0), makeRequest(typo, 'u2', 0)]).catch((e: unknown) => e);
    expect(FleetError.is(published, 'UNKNOWN_MODEL'), `settled with ${String(published)}`).toBe(true);
    expect((published as FleetError).details).toMatchObject({ field: 'model', index: 1, model: typo });
    // A listed model whose workers have not started yet: its topic is created, the request waits for them.
    await producer.publish(makeRequest(served, 's2', 0));
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      const topics = await admin.listTopics();
      expect(topics.filter((t) => t.startsWith(`${typo}.`))).toEqual([]);
      expect(topics).toContain(`${served}.requests.p0`);
    } finally {
      await admin.disconnect();
    }
  }, 60_000);
});

describe('kafka producer whose inbox topic is deleted under it (a cleanup taking it for a dead client\'s)', () => {
  it('a request() after the first timeout opens a new inbox and is answered, where every later one timed out', async () => {
    const model = uniqueName('inbox-gone');
    const worker: Transport = createTransport({ kind: 'kafka', kafka: kafkaSettings() }, { kafka: { partitions: 1 } });
    open.push(worker);
    await worker.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void worker.settle(ds.map(outcomeFor)) });
    const producer = new KafkaProducer(kafkaSettings(), { partitions: 1 });
    open.push(producer);
    expect((await producer.request(makeRequest(model, 'g1', 0), { timeoutMs: 30_000 })).id).toBe('g1');
    const first = producer.inbox;
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      await admin.deleteTopics({ topics: [first] });
      // Its reply goes to {model}.replies (the worker finds the inbox gone): this one times out.
      const lost = await producer.request(makeRequest(model, 'g2', 0), { timeoutMs: 3_000 }).catch((e: unknown) => e);
      expect(FleetError.is(lost, 'TIMEOUT'), `settled with ${String(lost)}`).toBe(true);
      for (let i = 0; i < 50 && producer.inbox === first; i++) await new Promise((r) => setTimeout(r, 100));
      const later = await producer.request(makeRequest(model, 'g3', 0), { timeoutMs: 15_000 }).then((r) => r.id, (e: unknown) => String(e));
      expect(later).toBe('g3');
      expect(producer.inbox).not.toBe(first);
      expect(await admin.listTopics(), 'the deleted inbox was created again').not.toContain(first);
    } finally {
      await admin.disconnect();
    }
  }, 90_000);
});
