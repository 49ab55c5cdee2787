// Proves the Kafka plumbing is real: a broker stores, hands out to a consumer group, keeps committed
// offsets, and runs kafkajs transactions (send + sendOffsets) to commit or abort.
import { Kafka, logLevel } from 'kafkajs';
import type { Admin, Consumer, KafkaMessage, Producer } from 'kafkajs';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';

const WAIT_MS = 20_000;

let kafka: Kafka;
let admin: Admin;
const cleanups: Array<() => Promise<void>> = [];

// Connected lazily inside each test (not in beforeAll), so a broker that failed to start shows
// up as failed tests carrying the reason rather than as a suite whose tests count as skipped.
async function connect(): Promise<void> {
  if (admin) return;
  kafka = new Kafka({ clientId: uniqueName('smoke'), brokers: getServices().kafkaBrokers, logLevel: logLevel.WARN });
  const connecting = kafka.admin();
  await connecting.connect();
  admin = connecting;
}

beforeEach(connect);

afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  await admin?.disconnect();
});

async function createTopic(prefix: string, numPartitions = 1): Promise<string> {
  const topic = uniqueName(prefix);
  await createTopicsSettled(admin, [{ topic, numPartitions }]);
  return topic;
}

async function connectedProducer(config?: Parameters<Kafka['producer']>[0]): Promise<Producer> {
  const producer = kafka.producer(config);
  await producer.connect();
  cleanups.push(() => producer.disconnect());
  return producer;
}

/** Runs a consumer until `count` messages arrived, then disconnects it (committing on the way out). */
async function consumeExactly(
  consumer: Consumer,
  topic: string,
  count: number,
): Promise<KafkaMessage[]> {
  const received: KafkaMessage[] = [];
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`got ${received.length}/${count} messages from ${topic} within ${WAIT_MS} ms`)), WAIT_MS);
    void consumer.run({
      eachMessage: async ({ message }) => {
        received.push(message);
        if (received.length === count) {
          clearTimeout(timer);
          resolve();
        }
      },
    });
  });
  await consumer.disconnect();
  return received;
}

async function committedOffset(groupId: string, topic: string, partition: number): Promise<string | undefined> {
  const offsets = await admin.fetchOffsets({ groupId, topics: [topic] });
  return offsets[0]?.partitions.find((p) => p.partition === partition)?.offset;
}

/** Transaction markers are written after EndTxn returns, so committed offsets show up shortly after. */
async function eventuallyCommittedOffset(groupId: string, topic: string, partition: number, expected: string): Promise<string | undefined> {
  const deadline = Date.now() + WAIT_MS;
  let offset = await committedOffset(groupId, topic, partition);
  while (offset !== expected && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    offset = await committedOffset(groupId, topic, partition);
  }
  return offset;
}

describe('kafka smoke (real broker)', () => {
  it('the broker answers metadata for a real cluster', async () => {
    const cluster = await admin.describeCluster();
    expect(cluster.brokers.length).toBeGreaterThan(0);
    expect(cluster.clusterId).toMatch(/\S+/);
  });

  it('produces, group-consumes and keeps the committed offsets', async () => {
    const topic = await createTopic('smoke-plain', 2);
    const groupId = uniqueName('smoke-group');
    const producer = await connectedProducer();
    await producer.send({
      topic,
      messages: [
        { partition: 0, key: 'a', value: 'm0' },
        { partition: 0, key: 'b', value: 'm1' },
        { partition: 1, key: 'c', value: 'm2' },
      ],
    });

    const received = await consumeExactly(kafka.consumer({ groupId }), topic, 3);
    expect(received.map((m) => m.value?.toString()).sort()).toEqual(['m0', 'm1', 'm2']);

    // The next offset to read, per partition, is what the group committed on the broker.
    expect(await committedOffset(groupId, topic, 0)).toBe('2');
    expect(await committedOffset(groupId, topic, 1)).toBe('1');

    // A new member of the same group resumes after the commit: it only sees what came later.
    await producer.send({ topic, messages: [{ partition: 1, value: 'm3' }] });
    const resumed = await consumeExactly(kafka.consumer({ groupId }), topic, 1);
    expect(resumed.map((m) => m.value?.toString())).toEqual(['m3']);
    expect(await committedOffset(groupId, topic, 1)).toBe('2');
  });

  it('commits a transaction with sendOffsets, and hides an aborted one from read_committed', async () => {
    const input = await createTopic('smoke-tx-in');
    const output = await createTopic('smoke-tx-out');
    const groupId = uniqueName('smoke-tx-group');
    const producer = await connectedProducer({
      transactionalId: uniqueName('smoke-tx'),
      idempotent: true,
      maxInFlightRequests: 1,
    });

    const committed = await producer.transaction();
    await committed.send({ topic: output, messages: [{ value: 'result-1' }] });
    await committed.sendOffsets({
      consumerGroupId: groupId,
      topics: [{ topic: input, partitions: [{ partition: 0, offset: '7' }] }],
    });
    await committed.commit();

    const aborted = await producer.transaction();
    await aborted.send({ topic: output, messages: [{ value: 'never-visible' }] });
    await aborted.sendOffsets({
      consumerGroupId: groupId,
      topics: [{ topic: input, partitions: [{ partition: 0, offset: '99' }] }],
    });
    await aborted.abort();

    const after = await producer.transaction();
    await after.send({ topic: output, messages: [{ value: 'result-2' }] });
    await after.commit();

    expect(await eventuallyCommittedOffset(groupId, input, 0, '7')).toBe('7');
    const reader = kafka.consumer({ groupId: uniqueName('smoke-tx-reader'), readUncommitted: false });
    const seen = await consumeExactly(reader, output, 2);
    expect(seen.map((m) => m.value?.toString())).toEqual(['result-1', 'result-2']);
  });
});
