// Exactly-once (transactional) mode of the Kafka transport: the in-flight bound, revoked
// partitions, close() with settles that cannot complete, a result the broker refuses, and a reply
// topic deleted after use; a transaction that fails for a passing reason (a fenced producer).
import { describe, expect, it } from 'vitest';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { decodeResult } from '../../../src/codec/index.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import type { Delivery } from '../../../src/transport/transport.ts';
import { uniqueName } from '../../helpers/services.ts';
import { idOf, Inbox, makeRequest, outcomeFor, sleep, startWith } from './conformance-kit.ts';
import { adminKafka, committed, kafkaSettings, readTopic } from './kafka-harness.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';

const track = closeAfterEach();

/** Resolves to 'timeout' when `p` has not settled within `ms`. */
function within<T>(p: Promise<T>, ms: number): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), ms)));
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/**
 * A topic whose size limit a result padded by `pad` does not fit: the broker refuses it
 * (MESSAGE_TOO_LARGE). Not a tiny limit: a transaction's abort marker must still fit.
 */
async function smallTopic(): Promise<string> {
  const topic = uniqueName('eos-unpublishable');
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    await createTopicsSettled(admin, [{ topic, numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: '1000' }] }]);
  } finally {
    await admin.disconnect();
  }
  return topic;
}
const pad = { meta: { pad: 'x'.repeat(2_000) } };

const partitionOf = (d: Delivery): number => Number(d.deliveryId.split('/')[1]);

describe('kafka transport, exactly-once', () => {
  it('a partition paused by the in-flight bound resumes once its deliveries are settled', async () => {
    const settings = kafkaSettings({ exactlyOnce: true });
    const model = uniqueName('eosbound').replace(/-/g, '');
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    const t = track(new KafkaTransport(settings, { partitions: 1, lowPriorityInflightPerPartition: 4 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    await producer.publish(Array.from({ length: 4 }, (_, i) => makeRequest(model, `a${i}`, 1)));
    const first = await inbox.waitFor(4, 30_000);
    // Four unsettled: the partition is at its bound and paused.
    await producer.publish(Array.from({ length: 4 }, (_, i) => makeRequest(model, `b${i}`, 1)));
    expect(await inbox.quietFor(1_500)).toEqual([]);
    await t.settle(first.map(outcomeFor));
    const all = await inbox.waitFor(8, 15_000);
    expect(all.slice(4).map(idOf)).toEqual(['b0', 'b1', 'b2', 'b3']);
  });

  it('close() does not hang on a settle stuck behind an unsettled delivery; the rest is redelivered', async () => {
    const settings = kafkaSettings({ exactlyOnce: true });
    const model = uniqueName('eosclose').replace(/-/g, '');
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    await producer.publish([makeRequest(model, 'c0', 0), makeRequest(model, 'c1', 0)]);
    const a = new KafkaTransport(settings, { partitions: 1 });
    const inbox = new Inbox();
    await startWith(a, model, inbox);
    const [c0, c1] = await inbox.waitFor(2, 30_000);
    // c1 cannot commit before c0, which the "runtime" never settles (a device that hung on it).
    const stuck = a.settle([outcomeFor(c1 as Delivery)]).then(
      () => undefined,
      (e: unknown) => e,
    );
    await sleep(500);
    expect(await within(a.close(), 15_000)).not.toBe('timeout');
    const err = await within(stuck, 1_000);
    expect(err).toBeInstanceOf(FleetError);
    expect((err as FleetError).code).toBe('CLOSED');
    expect(await committed(settings.groupId, `${model}.requests.p0`)).toBe(-1);

    const b = track(new KafkaTransport(settings, { partitions: 1 }));
    const inboxB = new Inbox();
    await startWith(b, model, inboxB);
    expect((await inboxB.waitFor(2, 30_000)).map(idOf)).toEqual([idOf(c0 as Delivery), idOf(c1 as Delivery)]);
  });

  it('a delivery of a partition revoked by a rebalance settles without hanging; the new owner answers it, once', async () => {
    const settings = kafkaSettings({ exactlyOnce: true });
    const model = uniqueName('eosrevoke').replace(/-/g, '');
    const producer = track(new KafkaProducer(settings, { partitions: 2 }));
    const ids = Array.from({ length: 12 }, (_, i) => `r${i}`);
    await producer.publish(ids.map((id) => makeRequest(model, id, 0)));
    const a = track(new KafkaTransport(settings, { partitions: 2, instanceId: 'a' }));
    const inboxA = new Inbox();
    await startWith(a, model, inboxA);
    const heldByA = await inboxA.waitFor(ids.length, 30_000);
    expect(new Set(heldByA.map(partitionOf)).size).toBe(2);

    // A second worker joins: one of A's partitions moves to it, with A's deliveries unsettled.
    const b = track(new KafkaTransport(settings, { partitions: 2, instanceId: 'b' }));
    const inboxB = new Inbox();
    await startWith(b, model, inboxB);
    const first = await inboxB.waitFor(1, 30_000);
    const moved = partitionOf(first[0] as Delivery);
    const movedCount = heldByA.filter((d) => partitionOf(d) === moved).length;
    const gotByB = await inboxB.waitFor(movedCount, 15_000);
    expect(new Set(gotByB.map(partitionOf))).toEqual(new Set([moved]));

    expect(await within(a.settle(heldByA.map(outcomeFor)), 15_000)).not.toBe('timeout');
    await b.settle(gotByB.map(outcomeFor));
    const replies = await readTopic(`${model}.replies`, ids.length + 1, 5_000);
    expect(replies.map((m) => decodeResult(m.value).id).sort()).toEqual([...ids].sort());
  });

  it('a result the broker refuses for good fails only its own settle, not the settles in the same transaction', async () => {
    const settings = kafkaSettings({ exactlyOnce: true });
    const model = uniqueName('eospoison').replace(/-/g, '');
    const unpublishable = await smallTopic();
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    await producer.publish(['p0', 'p1', 'p2'].map((id) => makeRequest(model, id, 0, pad)));
    const t = track(new KafkaTransport(settings, { partitions: 1 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const [d0, d1, d2] = (await inbox.waitFor(3, 30_000)) as [Delivery, Delivery, Delivery];
    // The first settle's transaction starts at once; the other two ride together in the next one.
    const s0 = t.settle([outcomeFor(d0)]);
    const s1 = t.settle([{ ...outcomeFor(d1), replyTo: unpublishable }]).then(
      () => undefined,
      (e: unknown) => e as FleetError,
    );
    const s2 = t.settle([outcomeFor(d2)]).then(
      () => undefined,
      (e: unknown) => e as FleetError,
    );
    await s0;
    const refused = await s1;
    expect(refused?.details['limit']).toBe('message-size');
    // p2 waits behind p1 in the partition: not refused for good, but to be settled again.
    const second = await within(s2, 15_000);
    expect(second).toBeInstanceOf(FleetError);
    expect((second as FleetError).retriable).toBe(true);
    // What the runtime does with a result refused for good: a small one to the default replies.
    await t.settle([outcomeFor(d1)]);
    await t.settle([outcomeFor(d2)]);
    const replies = await readTopic(`${model}.replies`, 4, 5_000);
    expect(replies.map((m) => decodeResult(m.value).id)).toEqual(['p0', 'p1', 'p2']);
  });

  it('after a transaction the broker refused, the next ones still go out (no stale producer sequence numbers)', async () => {
    const settings = kafkaSettings({ exactlyOnce: true });
    const model = uniqueName('eosseq').replace(/-/g, '');
    const unpublishable = await smallTopic();
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    await producer.publish(['q0', 'q1'].map((id) => makeRequest(model, id, 0, pad)));
    const t = track(new KafkaTransport(settings, { partitions: 1 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const [d0, d1] = (await inbox.waitFor(2, 30_000)) as [Delivery, Delivery];
    // One produce request: the replies partition accepts q1, the small topic refuses q0.
    const refused = await t.settle([{ ...outcomeFor(d0), replyTo: unpublishable }, outcomeFor(d1)]).then(
      () => undefined,
      (e: unknown) => e as FleetError,
    );
    expect(refused?.details['limit']).toBe('message-size');
    await t.settle([outcomeFor(d0), outcomeFor(d1)]);
    const replies = await readTopic(`${model}.replies`, 3, 5_000);
    expect(replies.map((m) => decodeResult(m.value).id)).toEqual(['q0', 'q1']);
  });

  it('a result for a reply topic deleted after use goes out again, and the results settled behind it do not hang', async () => {
    const settings = kafkaSettings({ exactlyOnce: true });
    const model = uniqueName('eosgone').replace(/-/g, '');
    const replyTo = uniqueName('eosgone-replies');
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    await producer.publish(['g0', 'g1', 'g2'].map((id) => makeRequest(model, id, 0, { replyTo })));
    const t = track(new KafkaTransport(settings, { partitions: 1, retries: 1 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const [d0, d1, d2] = (await inbox.waitFor(3, 30_000)) as [Delivery, Delivery, Delivery];
    await t.settle([outcomeFor(d0)]);
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      await admin.deleteTopics({ topics: [replyTo] });
      while ((await admin.listTopics()).includes(replyTo)) await sleep(100);
    } finally {
      await admin.disconnect();
    }
    // g1's transaction fails on the deleted topic; g2, behind it in the partition, joins one once
    // its own new topic exists. Before, g1 was rejected and g2 waited behind it, and so did this
    // settle, which would settle g1 again: it never returned (past 60 s).
    const settled = await within(t.settle([outcomeFor(d1), { ...outcomeFor(d2), replyTo: `${replyTo}-other` }]), 30_000);
    expect(settled).not.toBe('timeout');
    expect(await committed(settings.groupId, `${model}.requests.p0`)).toBe(3);
    expect((await readTopic(replyTo, 1, 10_000)).map((m) => decodeResult(m.value).id)).toEqual(['g1']);
    expect((await readTopic(`${replyTo}-other`, 1, 10_000)).map((m) => decodeResult(m.value).id)).toEqual(['g2']);
  });
});

/**
 * The worker's transaction fails for a passing reason (fenced: another producer took its
 * transactional id, as a zombie's successor would; a fresh producer takes it back) while one
 * settle holds f0 and f1, f1 behind f0 in the partition. `gap`: a request nobody settled yet
 * lies between them and f1's topic exists (f1 is placed at once, behind the gap); else f1 names a
 * new reply topic and is placed once it exists, after f0 failed.
 */
async function fencedSettle(gap: boolean): Promise<void> {
  const settings = kafkaSettings({ exactlyOnce: true });
  const model = uniqueName('eosfenced').replace(/-/g, '');
  const newTopic = uniqueName('eosfenced-new');
  const producer = track(new KafkaProducer(settings, { partitions: 1 }));
  const f1 = gap ? makeRequest(model, 'f1', 0) : makeRequest(model, 'f1', 0, { replyTo: newTopic });
  await producer.publish([makeRequest(model, 'fa', 0), makeRequest(model, 'f0', 0), ...(gap ? [makeRequest(model, 'fx', 0)] : []), f1]);
  const instanceId = uniqueName('fenced');
  const t = track(new KafkaTransport(settings, { partitions: 1, instanceId }));
  const inbox = new Inbox();
  await startWith(t, model, inbox);
  const got = await inbox.waitFor(gap ? 4 : 3, 30_000);
  const d = (id: string): Delivery => got.find((g) => idOf(g) === id) as Delivery;
  // The worker's producer gets its transactional epoch.
  await t.settle([outcomeFor(d('fa'))]);
  const usurper = adminKafka().producer({ transactionalId: `${settings.clientId}.${settings.groupId}.${instanceId}`, idempotent: true, maxInFlightRequests: 1 });
  await usurper.connect();
  await (await usurper.transaction()).abort();
  await usurper.disconnect();
  // f0's transaction fails and f0 is rejected. Before, f1 waited behind it for good, and so did
  // this settle, which would settle f0 again.
  const started = performance.now();
  const settled = await within(
    t.settle([outcomeFor(d('f0')), outcomeFor(d('f1'))]).then(
      () => undefined,
      (e: unknown) => e,
    ),
    20_000,
  );
  console.log(`fenced transaction (gap ${gap}): the settle ended after ${(performance.now() - started).toFixed(0)} ms with ${String(settled)}`);
  expect(settled).not.toBe('timeout');
  expect(settled).toBeInstanceOf(FleetError);
  expect((settled as FleetError).retriable).toBe(true);
  // What the runtime's OutcomePublisher does with a retriable failure: the same settle again.
  const again = t.settle([outcomeFor(d('f0')), outcomeFor(d('f1'))]);
  if (gap) await t.settle([outcomeFor(d('fx'))]);
  expect(await within(again, 20_000)).not.toBe('timeout');
  expect(await committed(settings.groupId, `${model}.requests.p0`)).toBe(gap ? 4 : 3);
  const replies = (await readTopic(`${model}.replies`, gap ? 4 : 2, 10_000)).map((m) => decodeResult(m.value).id);
  expect(replies).toEqual(gap ? ['fa', 'f0', 'fx', 'f1'] : ['fa', 'f0']);
  if (!gap) expect((await readTopic(newTopic, 1, 10_000)).map((m) => decodeResult(m.value).id)).toEqual(['f1']);
}

describe('kafka transport, exactly-once: a transaction that fails for a passing reason', () => {
  it('a settle whose later result waits for a new reply topic returns, retriable, and goes through when settled again', async () => {
    await fencedSettle(false);
  });

  it('a settle whose later result waits behind a request nobody settled yet returns, retriable, and goes through when settled again', async () => {
    await fencedSettle(true);
  });
});
