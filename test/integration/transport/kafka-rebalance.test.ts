// The Kafka transport while its consumer group changes under it: transactions in flight as a
// rebalance starts. Results are held at the broker with a ProduceGate.
import { describe, expect, it } from 'vitest';
import { decodeResult } from '../../../src/codec/index.ts';
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
});
