// The Kafka transport while its consumer group changes under it: partitions moving to a joining
// worker and back while their results are being published, and transactions in flight as a
// rebalance starts. Results are held at the broker with a ProduceGate.
import { describe, expect, it } from 'vitest';
import { decodeResult, encodeRequest } from '../../../src/codec/index.ts';
import type { KafkaSettings } from '../../../src/contracts/fleet-config.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import type { Delivery } from '../../../src/transport/transport.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { until } from '../../helpers/until.ts';
import { idOf, Inbox, makeRequest, outcomeFor } from './conformance-kit.ts';
import { adminKafka, kafkaSettings, readTopic } from './kafka-harness.ts';
import { ProduceGate } from './produce-gate.ts';

const track = closeAfterEach();

const partitionOf = (d: Delivery): number => Number(d.deliveryId.split('/')[1]);

async function committedAt(groupId: string, topic: string, partition: number): Promise<number> {
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    const [t] = await admin.fetchOffsets({ groupId, topics: [topic] });
    return Number(t?.partitions.find((p) => p.partition === partition)?.offset ?? -1);
  } finally {
    await admin.disconnect();
  }
}

/** One request straight into a chosen partition of a request topic. */
async function publishTo(topic: string, partition: number, model: string, id: string): Promise<void> {
  const producer = adminKafka().producer();
  await producer.connect();
  try {
    await producer.send({ topic, acks: -1, messages: [{ partition, key: id, value: encodeRequest(makeRequest(model, id, 0)) }] });
  } finally {
    await producer.disconnect();
  }
}

/** Resolves to 'timeout' when `p` has not settled within `ms` (a partition stuck behind a lost entry waits for good). */
function within<T>(p: Promise<T>, ms: number): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), ms)));
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** A worker reading one priority level of `model` (one request topic) from 2 partitions. */
async function worker(settings: KafkaSettings, model: string, gate?: ProduceGate): Promise<{ t: KafkaTransport; inbox: Inbox }> {
  const t = track(new KafkaTransport(settings, { partitions: 2, ...(gate === undefined ? {} : { socketFactory: gate.socketFactory }) }));
  const inbox = new Inbox();
  await t.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: inbox.onDeliveries });
  return { t, inbox };
}

/** Requests on both partitions; returns them as the first worker received them. */
async function publishAndReceive(settings: KafkaSettings, model: string, count: number, inbox: Inbox): Promise<Delivery[]> {
  const producer = track(new KafkaProducer(settings, { partitions: 2 }));
  await producer.publish(Array.from({ length: count }, (_, i) => makeRequest(model, `q${i}`, 0)));
  const got = await inbox.waitFor(count, 30_000);
  expect(new Set(got.map(partitionOf)).size).toBe(2);
  return got;
}

/** Replies per request id on the model's reply topic (read_committed), once `total` arrived or quiet. */
async function repliesById(model: string, total: number): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  for (const m of await readTopic(`${model}.replies`, total + 1, 5_000)) {
    const id = decodeResult(m.value).id;
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

describe('kafka transport across rebalances', () => {
  it('a partition that comes back while its results are being published is committed to its end (at-least-once)', async () => {
    const settings = kafkaSettings();
    const model = uniqueName('back').replace(/-/g, '');
    const topic = `${model}.requests.p0`;
    const gate = track(new ProduceGate());
    const a = await worker(settings, model, gate);
    const heldByA = await publishAndReceive(settings, model, 16, a.inbox);

    // B joins: one partition moves to it with A's deliveries of it unsettled.
    const b = await worker(settings, model);
    const moved = partitionOf((await b.inbox.waitFor(1, 30_000))[0] as Delivery);
    const movedByA = heldByA.filter((d) => partitionOf(d) === moved);

    // A publishes those results (it does not know yet they moved); the brokers are slow to ack.
    gate.shutGate();
    const settling = a.t.settle(movedByA.map(outcomeFor));
    await until(() => gate.producesHeld > 0, 10_000, 'the results held at the broker');
    // B leaves without answering: the partition comes back to A, which fetches it again from the
    // last commit (none) while its publish is still in flight.
    await b.t.close();
    await publishTo(topic, moved, model, 'after');
    await until(() => a.inbox.all.some((d) => idOf(d) === 'after'), 30_000, 'A fetching the partition again');
    gate.open();
    expect(await within(settling, 15_000)).not.toBe('timeout');

    // As the runtime does: whatever A was handed since is answered; deliveries that are not open
    // (answered already) are refused and skipped.
    const since = a.inbox.all.slice(heldByA.length);
    await a.t.settle(since.map(outcomeFor)).catch(() => undefined);
    const end = movedByA.length + 1;
    const deadline = Date.now() + 10_000;
    while ((await committedAt(settings.groupId, topic, moved)) < end && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    expect(await committedAt(settings.groupId, topic, moved)).toBe(end);
  });

  it('exactly-once: a transaction in flight as a rebalance starts does not answer the requests the new owner answers', async () => {
    const settings = kafkaSettings({ exactlyOnce: true });
    const model = uniqueName('zombie').replace(/-/g, '');
    const gate = track(new ProduceGate());
    const a = await worker(settings, model, gate);
    const heldByA = await publishAndReceive(settings, model, 16, a.inbox);

    // A answers everything; its transaction is slow to get its results to the broker.
    gate.shutGate();
    const settling = a.t.settle(heldByA.map(outcomeFor));
    await until(() => gate.producesHeld > 0, 10_000, 'the transaction held at the broker');
    // Meanwhile B joins and takes a partition from the last commit (none yet): it answers those.
    const b = await worker(settings, model);
    const first = await b.inbox.waitFor(1, 30_000);
    const moved = partitionOf(first[0] as Delivery);
    const count = heldByA.filter((d) => partitionOf(d) === moved).length;
    const takenByB = await b.inbox.waitFor(count, 15_000);
    gate.open();
    await settling;
    await b.t.settle(takenByB.map(outcomeFor));

    const replies = await repliesById(model, heldByA.length);
    const twice = [...replies].filter(([, n]) => n > 1).map(([id]) => id);
    expect(twice).toEqual([]);
    expect([...replies.keys()].sort()).toEqual(heldByA.map(idOf).sort());
    expect(await committedAt(settings.groupId, `${model}.requests.p0`, moved)).toBe(count);
  });

  it('exactly-once: a partition that moves away and comes back while its transaction is held is answered once and committed to its end', async () => {
    const settings = kafkaSettings({ exactlyOnce: true });
    const model = uniqueName('eosback').replace(/-/g, '');
    const topic = `${model}.requests.p0`;
    const gate = track(new ProduceGate());
    const a = await worker(settings, model, gate);
    const heldByA = await publishAndReceive(settings, model, 16, a.inbox);

    gate.shutGate();
    const settling = a.t.settle(heldByA.map(outcomeFor));
    await until(() => gate.producesHeld > 0, 10_000, 'the transaction held at the broker');
    // B joins and leaves again without answering, all while A's transaction waits at the broker.
    const b = await worker(settings, model);
    const moved = partitionOf((await b.inbox.waitFor(1, 30_000))[0] as Delivery);
    const count = heldByA.filter((d) => partitionOf(d) === moved).length;
    await b.inbox.waitFor(count, 15_000);
    await b.t.close();
    await publishTo(topic, moved, model, 'after');
    await until(() => a.inbox.all.some((d) => idOf(d) === 'after'), 30_000, 'A fetching the partition again');
    gate.open();
    expect(await within(settling, 15_000)).not.toBe('timeout');
    // As the runtime does: whatever A was handed since is answered; deliveries no longer open are skipped.
    const since = a.t.settle(a.inbox.all.slice(heldByA.length).map(outcomeFor)).catch(() => undefined);
    expect(await within(since, 15_000)).not.toBe('timeout');

    const replies = await repliesById(model, heldByA.length + 1);
    expect([...replies].filter(([, n]) => n > 1).map(([id]) => id)).toEqual([]);
    expect([...replies.keys()].sort()).toEqual([...heldByA.map(idOf), 'after'].sort());
    expect(await committedAt(settings.groupId, topic, moved)).toBe(count + 1);
  });
});
