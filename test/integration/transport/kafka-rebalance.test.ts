// The Kafka transport while its consumer group changes under it: partitions moving to a joining
// worker and back while their results are being published, and transactions in flight as a
// rebalance starts. Results are held at the broker with a ProduceGate.
import { describe, expect, it } from 'vitest';
import { decodeResult, encodeRequest } from '../../../src/codec/index.ts';
import type { KafkaSettings } from '../../../src/contracts/fleet-config.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { KafkaTransport, type KafkaTransportOptions } from '../../../src/transport/kafka/kafka-transport.ts';
import type { Delivery } from '../../../src/transport/transport.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { until } from '../../helpers/until.ts';
import { idOf, Inbox, makeRequest, outcomeFor, sleep } from './conformance-kit.ts';
import { adminKafka, kafkaSettings, readTopic } from './kafka-harness.ts';
import { ProduceGate } from './produce-gate.ts';
import { ProduceOutage } from './produce-outage.ts';

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

/** A worker reading `levels` priority levels of `model` (one request topic each), 2 partitions each. */
async function worker(
  settings: KafkaSettings,
  model: string,
  gate?: { socketFactory: KafkaTransportOptions['socketFactory'] },
  options: KafkaTransportOptions & { levels?: number } = {},
): Promise<{ t: KafkaTransport; inbox: Inbox }> {
  const { levels = 1, ...rest } = options;
  const t = track(new KafkaTransport(settings, { partitions: 2, ...(gate === undefined ? {} : { socketFactory: gate.socketFactory }), ...rest }));
  const inbox = new Inbox();
  await t.start({ subscriptions: [{ model, priorityLevels: levels }], onDeliveries: inbox.onDeliveries });
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

  describe.each([
    { mode: 'at-least-once', exactlyOnce: false },
    { mode: 'exactly-once', exactlyOnce: true },
  ])('$mode: a publish that fails while the partition moves to another worker', ({ exactlyOnce }) => {
    it('the new owner answers and commits it; the old owner succeeding later neither answers again (exactly-once) nor touches the commit', async () => {
      const settings = kafkaSettings({ exactlyOnce });
      const model = uniqueName('latewin').replace(/-/g, '');
      const topic = `${model}.requests.p0`;
      const outage = track(new ProduceOutage());
      const a = await worker(settings, model, outage, { retries: 1 });
      const heldByA = await publishAndReceive(settings, model, 16, a.inbox);

      // A broker hiccup: A's results do not get out, its requests stay open.
      outage.start('reset');
      const failed = await a.t.settle(heldByA.map(outcomeFor)).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(failed).toBeDefined();
      // Meanwhile B joins, takes a partition from the last commit and answers it.
      const b = await worker(settings, model);
      const moved = partitionOf((await b.inbox.waitFor(1, 30_000))[0] as Delivery);
      const count = heldByA.filter((d) => partitionOf(d) === moved).length;
      const takenByB = await b.inbox.waitFor(count, 15_000);
      expect(takenByB.map(idOf).sort()).toEqual(heldByA.filter((d) => partitionOf(d) === moved).map(idOf).sort());
      await b.t.settle(takenByB.map(outcomeFor));
      expect(await committedAt(settings.groupId, topic, moved)).toBe(count);

      // The hiccup ends and A's runtime settles again: A's own partition is answered and
      // committed, the moved one's commit stays B's.
      outage.stop();
      await a.t.settle(heldByA.map(outcomeFor));
      const kept = 1 - moved;
      expect(await committedAt(settings.groupId, topic, kept)).toBe(heldByA.length - count);
      await sleep(500);
      expect(await committedAt(settings.groupId, topic, moved)).toBe(count);
      const replies = await repliesById(model, heldByA.length + (exactlyOnce ? 0 : count));
      expect([...replies.keys()].sort()).toEqual(heldByA.map(idOf).sort());
      // At-least-once allows A's late results for the moved partition: each at most twice.
      const most = Math.max(...replies.values());
      expect(most).toBe(exactlyOnce ? 1 : 2);
    });
  });

  it('pauses: partitions that come to a paused worker stay paused, and a partition paused by its bound resumes when it comes back', async () => {
    const settings = kafkaSettings();
    const model = uniqueName('pauses').replace(/-/g, '');
    const producer = track(new KafkaProducer(settings, { partitions: 2 }));
    // Bound 2 per partition of priority 1 (round robin gives a joining worker one of its two partitions).
    const a = await worker(settings, model, undefined, { levels: 3, lowPriorityInflightPerPartition: 2 });
    a.t.pause(model, [2]);
    await producer.publish(Array.from({ length: 10 }, (_, i) => makeRequest(model, `low${i}`, 2)));
    // One at a time: a fetch returns whole record batches, the granularity of the bound.
    for (let i = 0; i < 12; i++) {
      await producer.publish(makeRequest(model, `mid${i}`, 1));
      await sleep(100);
    }
    await sleep(1_000);
    // Priority 1 held back by its bound, priority 2 by the pause.
    expect(a.inbox.all.filter((d) => d.priority === 2)).toEqual([]);
    expect(a.inbox.all.length).toBeLessThan(12);

    // B joins: the partitions move around; what A gets of priority 2 stays paused.
    const b = await worker(settings, model, undefined, { levels: 3, lowPriorityInflightPerPartition: 100 });
    // B got a partition of each priority (round robin), and reads them from the last commit (none).
    await until(() => b.inbox.all.some((d) => d.priority === 1) && b.inbox.all.some((d) => d.priority === 2), 30_000, 'B reading priorities 1 and 2');
    await sleep(1_500);
    expect(a.inbox.all.filter((d) => d.priority === 2)).toEqual([]);
    // B leaves without answering: everything comes back to A, priority 2 still paused.
    await b.t.close();
    await sleep(5_000);
    expect(a.inbox.all.filter((d) => d.priority === 2)).toEqual([]);

    // A answers what it holds: the bound lifts on every priority-1 partition, also the one that
    // moved away and came back, and the rest of priority 1 arrives.
    const deadline = Date.now() + 30_000;
    const answered = new Set<string>();
    while (Date.now() < deadline && [...answered].filter((id) => id.startsWith('mid')).length < 12) {
      const open = a.inbox.all.filter((d) => !answered.has(d.deliveryId));
      if (open.length > 0) {
        await a.t.settle(open.map(outcomeFor)).catch(() => undefined);
        for (const d of open) answered.add(d.deliveryId);
        for (const d of open) answered.add(idOf(d));
      }
      await sleep(100);
    }
    expect(new Set(a.inbox.all.filter((d) => d.priority === 1).map(idOf)).size).toBe(12);
    expect(a.inbox.all.filter((d) => d.priority === 2)).toEqual([]);
    // Resumed, priority 2 arrives: every one of them, whichever partitions it sits on.
    a.t.resume(model, [2]);
    await until(() => new Set(a.inbox.all.filter((d) => d.priority === 2).map(idOf)).size === 10, 30_000, 'priority 2 after resume');
  });
});
