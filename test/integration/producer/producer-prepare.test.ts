// Producer.prepare(): the private reply inbox opened ahead of the first request, on real brokers.
// A load generator calls it before its run clock starts: on Kafka the opening (creating the inbox
// topic, joining its consumer group) took 0.5-4.6 s, and the requests made meanwhile waited on it
// with their deadlines running.
import { Redis } from 'ioredis';
import { AssignerProtocol } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { createTransport } from '../../../src/transport/index.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import type { Transport } from '../../../src/transport/transport.ts';
import { freePort } from '../../helpers/service-process.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { bullmqSettings } from '../transport/bullmq-harness.ts';
import { makeRequest, outcomeFor } from '../transport/conformance-kit.ts';
import { adminKafka, kafkaSettings } from '../transport/kafka-harness.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});

const failure = (p: Promise<unknown>): Promise<unknown> => p.then(() => undefined, (e: unknown) => e);

async function answering(transport: Transport, model: string): Promise<void> {
  open.push(transport);
  await transport.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void transport.settle(ds.map(outcomeFor)) });
}

describe('kafka producer prepare()', () => {
  it('resolves once the inbox consumer group is Stable and its member holds the inbox partition; a request then is answered on that inbox', async () => {
    const model = uniqueName('prep');
    await answering(createTransport({ kind: 'kafka', kafka: kafkaSettings() }, { kafka: { partitions: 2 } }), model);
    const producer = new KafkaProducer(kafkaSettings(), { partitions: 2 });
    open.push(producer);
    const inbox = producer.inbox;

    await producer.prepare();
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      expect(await admin.listTopics()).toContain(inbox);
      const [group] = (await admin.describeGroups([`${inbox}.group`])).groups;
      expect(group?.state).toBe('Stable');
      expect(group?.members).toHaveLength(1);
      const assigned = AssignerProtocol.MemberAssignment.decode(group?.members[0]?.memberAssignment as Buffer);
      expect(assigned?.assignment).toEqual({ [inbox]: [0] });
    } finally {
      await admin.disconnect();
    }

    // Once open it stays open: a second prepare() and the request reuse it.
    await producer.prepare();
    const reply = await producer.request(makeRequest(model, 'p1', 0), { timeoutMs: 30_000 });
    expect(reply.id).toBe('p1');
    expect(producer.inbox).toBe(inbox);
  }, 90_000);

  it('against brokers that do not answer: rejects naming transport.kafka.brokers instead of waiting for ever', async () => {
    const port = await freePort();
    const producer = new KafkaProducer(kafkaSettings({ brokers: [`127.0.0.1:${port}`] }));
    open.push(producer);
    const startedAt = Date.now();
    const err = await failure(producer.prepare());
    expect(err).toBeInstanceOf(FleetError);
    expect((err as FleetError).message).toMatch(/kafka producer failed: no broker of transport\.kafka\.brokers \(127\.0\.0\.1:\d+\) answered/);
    expect(Date.now() - startedAt, 'kafkajs gives up connecting by itself').toBeLessThan(30_000);
  }, 60_000);

  it('after close(): rejects with CLOSED and creates no inbox topic', async () => {
    const producer = new KafkaProducer(kafkaSettings());
    await producer.close();
    const err = await failure(producer.prepare());
    expect(FleetError.is(err, 'CLOSED'), String(err)).toBe(true);
  });
});

describe('bullmq producer prepare()', () => {
  it("starts the inbox's reply worker (its named connection is on Redis); a request then is answered", async () => {
    const settings = bullmqSettings();
    const model = uniqueName('prep');
    await answering(createTransport({ kind: 'bullmq', bullmq: settings }), model);
    const producer = new BullmqProducer(settings);
    open.push(producer);
    await producer.prepare();
    const redis = new Redis(getServices().redisUrl);
    try {
      const names = String(await redis.client('LIST')).split('\n').map((l) => /name=(\S*)/.exec(l)?.[1] ?? '');
      expect(names).toContain(`npu-fleet-replies:${settings.prefix}:${producer.inbox}`.replace(/[^\w:.-]/g, '_'));
    } finally {
      redis.disconnect();
    }
    const reply = await producer.request(makeRequest(model, 'p1', 0), { timeoutMs: 30_000 });
    expect(reply.id).toBe('p1');
  });

  it('against a Redis that does not answer: rejects within connectTimeoutMs naming transport.bullmq.redisUrl', async () => {
    const producer = new BullmqProducer(bullmqSettings({ redisUrl: 'redis://127.0.0.1:1', connectTimeoutMs: 1_000 }));
    open.push(producer);
    const startedAt = Date.now();
    const err = await failure(producer.prepare());
    expect(err).toBeInstanceOf(FleetError);
    expect((err as FleetError).message).toMatch(/^bullmq producer: Redis at 127\.0\.0\.1:1 did not answer within 1000 ms .*check transport\.bullmq\.redisUrl/);
    expect(Date.now() - startedAt).toBeLessThan(6_000);
  });

  it('against a port nothing listens on: the error gives the connection error (ECONNREFUSED), not only "Command timed out"', async () => {
    const producer = new BullmqProducer(bullmqSettings({ redisUrl: 'redis://127.0.0.1:1', connectTimeoutMs: 1_000 }));
    open.push(producer);
    const err = await failure(producer.prepare());
    expect((err as FleetError).message).toMatch(/^bullmq producer: Redis at 127\.0\.0\.1:1 did not answer within 1000 ms \(connect ECONNREFUSED 127\.0\.0\.1:1\); /);
  });
});

describe('memory producer prepare()', () => {
  it('resolves; a request then is answered; after close() it rejects with CLOSED', async () => {
    const broker = new MemoryBroker();
    const model = uniqueName('prep');
    await answering(createTransport({ kind: 'memory' }, { memoryBroker: broker }), model);
    const producer = new MemoryProducer({ broker });
    open.push(producer);
    await producer.prepare();
    expect((await producer.request(makeRequest(model, 'p1', 0), { timeoutMs: 5_000 })).id).toBe('p1');
    await producer.close();
    expect(FleetError.is(await failure(producer.prepare()), 'CLOSED')).toBe(true);
  });
});

describe('prepare() with a clientId that cannot name the inbox', () => {
  it('rejects with the same INVALID_ARGUMENT as request(), on every transport, before connecting', async () => {
    const clientId = 'no:colons';
    for (const producer of [
      new KafkaProducer(kafkaSettings({ brokers: ['127.0.0.1:1'] }), { clientId }),
      new BullmqProducer(bullmqSettings({ redisUrl: 'redis://127.0.0.1:1', connectTimeoutMs: 1_000 }), { clientId }),
      new MemoryProducer({ clientId }),
    ]) {
      open.push(producer);
      const err = await failure(producer.prepare());
      expect(FleetError.is(err, 'INVALID_ARGUMENT'), `${producer.kind}: ${String(err)}`).toBe(true);
      expect((err as FleetError).message).toMatch(/clientId "no:colons" cannot name this producer's private inbox/);
    }
  });
});
