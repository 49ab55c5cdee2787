// The producer client on every transport against a real broker: bulk publish + subscribeReplies,
// many concurrent request() calls, JSON encoding, timeout and close semantics.
import { Redis } from 'ioredis';
import { Kafka, logLevel } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import type { TransportSettings } from '../../../src/contracts/fleet-config.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { createProducer } from '../../../src/producer/index.ts';
import type { Producer } from '../../../src/producer/producer.ts';
import { createTransport } from '../../../src/transport/index.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import type { Transport } from '../../../src/transport/transport.ts';
import { uniqueName } from '../../helpers/services.ts';
import { bullmqSettings } from '../transport/bullmq-harness.ts';
import { decodeBody, makeRequest, outcomeFor, ResultSink } from '../transport/conformance-kit.ts';
import { kafkaSettings } from '../transport/kafka-harness.ts';

interface Setup {
  readonly name: string;
  settings(): TransportSettings;
}

const broker = new MemoryBroker();
const setups: Setup[] = [
  { name: 'memory', settings: () => ({ kind: 'memory' }) },
  { name: 'kafka', settings: () => ({ kind: 'kafka', kafka: kafkaSettings() }) },
  { name: 'bullmq', settings: () => ({ kind: 'bullmq', bullmq: bullmqSettings() }) },
];

const open: Array<Producer | Transport> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});

describe.each(setups)('producer on $name', (setup) => {
  const pair = async (model: string, levels = 3) => {
    const settings = setup.settings();
    const producer = createProducer(settings, { memoryBroker: broker, partitions: 2 });
    const worker = createTransport(settings, { memoryBroker: broker, kafka: { partitions: 2 } });
    open.push(producer, worker);
    const seen: number[] = [];
    await worker.start({
      subscriptions: [{ model, priorityLevels: levels }],
      onDeliveries: (ds) => {
        for (const d of ds) seen.push(d.priority ?? -1);
        void worker.settle(ds.map(outcomeFor));
      },
    });
    return { producer, worker, seen };
  };

  it('publishes a bulk of requests (mixed priorities) and every result arrives on the subscribed replyTo', async () => {
    const model = uniqueName('bulk');
    const { producer, seen } = await pair(model);
    const replyTo = uniqueName('bulk-replies');
    const sink = new ResultSink();
    const sub = await producer.subscribeReplies(replyTo, sink.onResult);
    const requests = Array.from({ length: 300 }, (_, i) => makeRequest(model, `b${i}`, i % 3, { replyTo }));
    await producer.publish(requests);
    const results = await sink.waitFor(300, 60_000);
    expect(new Set(results.map((r) => r.id))).toEqual(new Set(requests.map((r) => r.id)));
    expect(results.every((r) => r.status === 'ok')).toBe(true);
    expect(seen.filter((p) => p === 0)).toHaveLength(100);
    await sub.close();
  });

  it('refuses a publish holding an invalid request, naming its field, and sends none of it', async () => {
    const model = uniqueName('refuse');
    const { producer, seen } = await pair(model);
    const bad = { ...makeRequest(model, 'bad', 1), createdAt: undefined } as unknown as Parameters<Producer['publish']>[0];
    const err: unknown = await producer.publish([makeRequest(model, 'good', 0), bad as never]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FleetError);
    expect((err as FleetError).code).toBe('INVALID_ARGUMENT');
    expect((err as FleetError).details.field).toBe('createdAt');
    expect((err as FleetError).message).toMatch(/^invalid request \[1\] \(id "bad"\): createdAt: .*nothing was published$/);
    const unreachable = await producer.publish(makeRequest(model, 'colon', 0, { replyTo: 'no:such' })).catch((e: unknown) => e);
    expect((unreachable as FleetError).details.field).toBe('replyTo');
    // The worker side of the pair is running: anything sent would have been seen by now.
    await new Promise((r) => setTimeout(r, 1_500));
    expect(seen).toEqual([]);
  });

  it('request() correlates many concurrent replies by id; JSON-encoded requests work too', async () => {
    const model = uniqueName('req');
    const { producer } = await pair(model);
    const requests = Array.from({ length: 50 }, (_, i) => makeRequest(model, `q${i}`, i % 3));
    const results = await Promise.all(
      requests.map((r, i) => producer.request(r, { timeoutMs: 30_000, encoding: i % 2 === 0 ? 'json' : 'binary' })),
    );
    expect(results.map((r) => r.id)).toEqual(requests.map((r) => r.id));
    expect(results.map((r) => r.meta)).toEqual(requests.map((r) => r.meta));
  });

  it('request() times out with TIMEOUT; close() rejects what is still waiting with CLOSED', async () => {
    const settings = setup.settings();
    const producer = createProducer(settings, { memoryBroker: broker, partitions: 2 });
    open.push(producer);
    const model = uniqueName('nobody');
    const timedOut = await producer.request(makeRequest(model, 't1', 0), { timeoutMs: 200 }).catch((e: unknown) => e);
    expect(FleetError.is(timedOut, 'TIMEOUT')).toBe(true);
    const pending = producer.request(makeRequest(model, 't2', 0), { timeoutMs: 60_000 }).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 300));
    await producer.close();
    expect(FleetError.is(await pending, 'CLOSED')).toBe(true);
    await expect(producer.publish(makeRequest(model, 't3', 0))).rejects.toThrow(FleetError);
  });

  it('publishRaw delivers the body untouched (for malformed-input drills)', async () => {
    const settings = setup.settings();
    const model = uniqueName('raw');
    const producer = createProducer(settings, { memoryBroker: broker, partitions: 2 });
    const worker = createTransport(settings, { memoryBroker: broker, kafka: { partitions: 2 } });
    open.push(producer, worker);
    const bodies: unknown[] = [];
    await worker.start({ subscriptions: [{ model, priorityLevels: 2 }], onDeliveries: (ds) => bodies.push(...ds.map((d) => d.body)) });
    const good = makeRequest(model, 'fine', 1);
    await producer.publishRaw([{ model, body: { not: 'a request' }, priority: 1 }]);
    await producer.publish(good);
    const deadline = Date.now() + 30_000;
    while (bodies.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(bodies).toHaveLength(2);
    const decoded = bodies.map((b) => {
      try {
        return decodeBody({ deliveryId: '', model, priority: 1, body: b as Uint8Array, receivedAt: 0, redelivered: false }).id;
      } catch {
        return 'undecodable';
      }
    });
    expect(decoded.sort()).toEqual(['fine', 'undecodable']);
  });
});

describe('bullmq producer connections', () => {
  it('closing a reply subscription, and the producer, closes their Redis connections (they used to stay open, reconnecting forever)', async () => {
    const settings = bullmqSettings();
    const producer = new BullmqProducer(settings);
    open.push(producer);
    const admin = new Redis(settings.redisUrl);
    try {
      const mine = async (): Promise<string[]> =>
        String(await admin.call('CLIENT', 'LIST'))
          .split('\n')
          .map((line) => /name=(\S*)/.exec(line)?.[1] ?? '')
          .filter((name) => name.startsWith(`npu-fleet-replies:${settings.prefix}:`));
      const subs = await Promise.all(['a', 'b', 'c'].map((q) => producer.subscribeReplies(`${q}-replies`, () => {})));
      await producer.request(makeRequest(uniqueName('m'), 'r-1', 0), { timeoutMs: 300 }).catch(() => undefined);
      // Each subscription's reply worker (and the request() inbox) owns named connections.
      expect((await mine()).length).toBeGreaterThanOrEqual(4);
      await subs[0]!.close();
      const until = async (want: (names: string[]) => boolean): Promise<string[]> => {
        for (let end = Date.now() + 5_000; ; await new Promise((r) => setTimeout(r, 50))) {
          const names = await mine();
          if (want(names) || Date.now() > end) return names;
        }
      };
      expect(await until((n) => !n.some((x) => x.endsWith(':a-replies')))).not.toContainEqual(expect.stringMatching(/:a-replies$/));
      await producer.close();
      expect(await until((n) => n.length === 0)).toEqual([]);
    } finally {
      admin.disconnect();
    }
  });
});

describe('bullmq producer against a Redis that does not answer', () => {
  it('publish and subscribe fail within connectTimeoutMs, naming transport.bullmq.redisUrl, instead of waiting forever', async () => {
    const producer = new BullmqProducer(bullmqSettings({ redisUrl: 'redis://127.0.0.1:1', connectTimeoutMs: 1_000 }));
    open.push(producer);
    const startedAt = Date.now();
    const failure = (p: Promise<unknown>): Promise<unknown> => p.then(() => undefined, (e: unknown) => e);
    for (const err of [await failure(producer.publish(makeRequest('m', 'r-1', 0))), await failure(producer.subscribeReplies('replies', () => {}))]) {
      expect(err).toBeInstanceOf(FleetError);
      expect((err as FleetError).code).toBe('TRANSPORT_ERROR');
      expect((err as FleetError).message).toMatch(/^bullmq producer: Redis at 127\.0\.0\.1:1 did not answer within 1000 ms .*check transport\.bullmq\.redisUrl/);
    }
    expect(Date.now() - startedAt).toBeLessThan(6_000);
  });
});

describe('kafka producer and priority topics', () => {
  it('refuses a priority whose topic no worker reads (the model has 2 levels), sends nothing, and still publishes the served ones', async () => {
    const settings: TransportSettings = { kind: 'kafka', kafka: kafkaSettings() };
    const model = uniqueName('levels');
    const producer = createProducer(settings, { partitions: 2 });
    const worker = createTransport(settings, { kafka: { partitions: 2 } });
    open.push(producer, worker);
    const seen: string[] = [];
    await worker.start({ subscriptions: [{ model, priorityLevels: 2 }], onDeliveries: (ds) => seen.push(...ds.map((d) => decodeBody(d).id)) });
    const err = await producer.publish([makeRequest(model, 'ok-0', 0), makeRequest(model, 'lost-5', 5)]).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(FleetError);
    expect((err as FleetError).code).toBe('INVALID_ARGUMENT');
    expect((err as FleetError).details).toMatchObject({ field: 'priority', priority: 5, served: [0, 1] });
    expect((err as FleetError).message).toMatch(/no worker reads .*\.p5; the model's topics exist for priorities 0, 1 \(its workers create one per priorityLevels level .*start the model's workers first$/);
    // Refused before sending: the topic was not created and the batch-mate was not sent either.
    await producer.publish([makeRequest(model, 'ok-1', 1)]);
    const deadline = Date.now() + 30_000;
    while (!seen.includes('ok-1') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(seen).toEqual(['ok-1']);
    const admin = new Kafka({ brokers: settings.kafka.brokers, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    const topics = await admin.listTopics();
    await admin.disconnect();
    expect(topics.filter((t) => t.startsWith(`${model}.`)).some((t) => t.endsWith('.p5'))).toBe(false);
  });

  it('creates the topic of a model no worker has started yet (requests wait for one)', async () => {
    const settings: TransportSettings = { kind: 'kafka', kafka: kafkaSettings() };
    const model = uniqueName('early');
    const producer = createProducer(settings, { partitions: 2 });
    open.push(producer);
    await expect(producer.publish(makeRequest(model, 'early-2', 2))).resolves.toBeUndefined();
  });
});

describe('kafka producer, long-lived', () => {
  // kafkajs refreshes metadata for every topic a producer ever wrote to (tulios/kafkajs#1622).
  it('keeps publishing after a topic it wrote to is deleted, and does not re-create that topic', async () => {
    const settings = kafkaSettings();
    const producer = new KafkaProducer(settings, { partitions: 1 });
    open.push(producer);
    const [retired, other, fresh] = [uniqueName('retired'), uniqueName('other'), uniqueName('fresh')].map((n) => n.replace(/-/g, ''));
    await producer.publish([makeRequest(retired as string, 'a', 0), makeRequest(other as string, 'b', 0)]);
    const admin = new Kafka({ clientId: 'producer-test', brokers: settings.brokers, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    try {
      const retiredTopic = `${retired}.requests.p0`;
      await admin.deleteTopics({ topics: [retiredTopic] });
      // A topic new to the producer makes kafkajs refresh all it knows, the deleted one too.
      const startedAt = Date.now();
      await producer.publish([makeRequest(fresh as string, 'c', 0), makeRequest(other as string, 'd', 0)]);
      // A publish held up by kafkajs retrying a refresh that names the deleted topic takes ~5 s.
      expect(Date.now() - startedAt).toBeLessThan(3_000);
      await new Promise((r) => setTimeout(r, 500));
      expect((await admin.listTopics()).includes(retiredTopic)).toBe(false);
    } finally {
      await admin.disconnect();
    }
  });
});
