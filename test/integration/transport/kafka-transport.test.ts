// Kafka-only behaviour beyond the conformance suite: exactly-once settle, heartbeats while work
// is held for longer than the session timeout, and priority 0 under a deep low-priority backlog.
import { describe, expect, it } from 'vitest';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { decodeResult } from '../../../src/codec/index.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import type { Delivery, Outcome } from '../../../src/transport/transport.ts';
import { uniqueName } from '../../helpers/services.ts';
import { idOf, Inbox, makeRequest, outcomeFor, PRIORITY_LEVELS, sleep, startWith } from './conformance-kit.ts';
import { adminKafka, committed, kafkaSettings, readTopic } from './kafka-harness.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { OutcomePublisher } from '../../../src/runtime/outcome-publisher.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { HEADERS } from '../../../src/transport/names.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';

const track = closeAfterEach();


/** Member ids of a consumer group, as the coordinator has them now. */
async function groupMembers(groupId: string): Promise<string[]> {
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    const { groups } = await admin.describeGroups([groupId]);
    return (groups[0]?.members ?? []).map((m) => m.memberId).sort();
  } finally {
    await admin.disconnect();
  }
}

function percentile(values: number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
}

describe('kafka transport', () => {
  it('start fails with an error naming transport.kafka.brokers when no broker answers', async () => {
    const t = track(new KafkaTransport(kafkaSettings({ brokers: ['127.0.0.1:1'] }), { retries: 1 }));
    const err: unknown = await startWith(t, uniqueName('no-kafka'), new Inbox()).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(FleetError);
    expect((err as FleetError).code).toBe('TRANSPORT_ERROR');
    expect((err as FleetError).message).toMatch(/no broker of transport\.kafka\.brokers \(127\.0\.0\.1:1\) answered; check the list/);
  });

  it('exactly-once: results and offsets commit together, in partition order; a crash redelivers only the uncommitted', async () => {
    const settings = kafkaSettings({ exactlyOnce: true });
    const model = uniqueName('eos').replace(/-/g, '');
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    await producer.publish(Array.from({ length: 6 }, (_, i) => makeRequest(model, `e${i}`, 0)));

    const a = new KafkaTransport(settings, { partitions: 1 });
    const inbox = new Inbox();
    await startWith(a, model, inbox);
    const got = await inbox.waitFor(6, 30_000);
    expect(got.map(idOf)).toEqual(['e0', 'e1', 'e2', 'e3', 'e4', 'e5']);
    // TxnOffsetCommit carries no metadata: hang counts stay with the worker's journal.
    expect(await a.markSuspect(got.slice(0, 1))).toBe(false);

    // Settled behind two open deliveries: its result may not become visible before them.
    let thirdDone = false;
    const third = a.settle([outcomeFor(got[2] as Delivery)]).then(() => {
      thirdDone = true;
    });
    await sleep(1_500);
    expect(thirdDone).toBe(false);
    expect(await readTopic(`${model}.replies`, 1, 1_500)).toEqual([]);

    await a.settle(got.slice(0, 2).map(outcomeFor));
    await third;
    const topic = `${model}.requests.p0`;
    expect(await committed(settings.groupId, topic)).toBe(3);
    const visible = await readTopic(`${model}.replies`, 3, 10_000);
    expect(visible.map((m) => decodeResult(m.value).id).sort()).toEqual(['e0', 'e1', 'e2']);

    await a.abort();
    const b = track(new KafkaTransport(settings, { partitions: 1 }));
    const inboxB = new Inbox();
    await startWith(b, model, inboxB);
    const again = await inboxB.waitFor(3, 30_000);
    expect(again.map(idOf)).toEqual(['e3', 'e4', 'e5']);
    await b.settle(again.map(outcomeFor));
    const all = await readTopic(`${model}.replies`, 6, 10_000);
    expect(all.map((m) => decodeResult(m.value).id).sort()).toEqual(['e0', 'e1', 'e2', 'e3', 'e4', 'e5']);
    expect(await committed(settings.groupId, topic)).toBe(6);
  });

  it('keeps its group membership while deliveries are held longer than the session timeout', async () => {
    const settings = kafkaSettings({ sessionTimeoutMs: 6_000 });
    const model = uniqueName('hb').replace(/-/g, '');
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    await producer.publish(Array.from({ length: 5 }, (_, i) => makeRequest(model, `h${i}`, 1)));
    const t = track(new KafkaTransport(settings, { partitions: 1 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const got = await inbox.waitFor(5, 30_000);
    const member = await groupMembers(settings.groupId);
    expect(member).toHaveLength(1);
    // A "device batch" of 10 s: nothing settles; the consumer must neither be evicted nor re-fed.
    expect(await inbox.quietFor(10_000)).toEqual([]);
    // Evicted, it would have rejoined under a new member id (and, alone in the group, been given
    // the same partitions back: the re-fetch is deduplicated, so the inbox alone cannot tell).
    expect(await groupMembers(settings.groupId)).toEqual(member);
    await t.settle(got.map(outcomeFor));
    expect(await committed(settings.groupId, `${model}.requests.p1`)).toBe(5);
  });

  it('priority 0 stays fast behind a deep lowest-priority backlog; the low-priority local backlog stays bounded', async () => {
    const settings = kafkaSettings();
    const model = uniqueName('prio').replace(/-/g, '');
    const producer = track(new KafkaProducer(settings, { partitions: 2 }));
    const bound = 100;
    const t = track(
      new KafkaTransport(settings, { partitions: 2, lowPriorityInflightPerPartition: bound, maxBytesPerPartition: 32 * 1024 }),
    );
    const local: Delivery[] = [];
    const sentAt = new Map<string, number>();
    const latency = new Map<string, number>();
    let maxLowLocal = 0;
    await t.start({
      subscriptions: [{ model, priorityLevels: 3 }],
      onDeliveries: (ds) => {
        local.push(...ds);
        maxLowLocal = Math.max(maxLowLocal, local.filter((d) => d.priority === 2).length);
      },
    });
    // Stand-in runtime: priority-ordered local queue, a "batch" of up to 16 every 4 ms.
    let running = true;
    const worker = (async () => {
      while (running) {
        local.sort((x, y) => (x.priority ?? 0) - (y.priority ?? 0));
        const batch = local.splice(0, 16);
        if (batch.length > 0) {
          await t.settle(batch.map(outcomeFor));
          for (const d of batch) {
            const id = idOf(d);
            const s = sentAt.get(id);
            if (s !== undefined) latency.set(id, Date.now() - s);
          }
        }
        await sleep(4);
      }
    })();
    const probe = async (tag: string): Promise<number[]> => {
      const ids: string[] = [];
      for (let i = 0; i < 15; i++) {
        const id = `${tag}${i}`;
        ids.push(id);
        sentAt.set(id, Date.now());
        await producer.publish(makeRequest(model, id, 0));
        await sleep(60);
      }
      const deadline = Date.now() + 30_000;
      while (ids.some((id) => !latency.has(id)) && Date.now() < deadline) await sleep(20);
      return ids.map((id) => latency.get(id) ?? Infinity);
    };
    await probe('warm');
    const idle = await probe('idle');
    // 6,000 low-priority requests land at once: far more than the worker drains meanwhile.
    // (In sends of 100: a fetch returns whole producer record batches, so the send size is the
    // granularity of the in-flight bound.)
    for (let k = 0; k < 60; k++) await producer.publish(Array.from({ length: 100 }, (_, i) => makeRequest(model, `low${k}-${i}`, 2)));
    await sleep(300);
    const loaded = await probe('busy');
    running = false;
    await worker;
    const idleP99 = percentile(idle, 99);
    const busyP99 = percentile(loaded, 99);
    console.log(`kafka p0 settle latency p99: idle ${idleP99} ms, behind backlog ${busyP99} ms; max low-priority local backlog ${maxLowLocal}`);
    expect(busyP99).toBeLessThanOrEqual(Math.max(2 * idleP99, idleP99 + 60));
    // The bound per partition plus one fetch of slack per partition (32 KiB, at least one record batch).
    expect(maxLowLocal).toBeLessThan(2 * (bound + 200));
  });

  it('settles a batch of results larger than the broker message limit in one call', async () => {
    const settings = kafkaSettings();
    const model = uniqueName('big').replace(/-/g, '');
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    const n = 4_000;
    for (let k = 0; k < n; k += 1_000) {
      await producer.publish(Array.from({ length: 1_000 }, (_, i) => makeRequest(model, `big${k + i}`, 0, { meta: { pad: 'x'.repeat(400) } })));
    }
    const t = track(new KafkaTransport(settings, { partitions: 1 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const got = await inbox.waitFor(n, 60_000);
    await t.settle(got.map(outcomeFor)); // ~2 MB of results to one partition
    expect(await committed(settings.groupId, `${model}.requests.p0`)).toBe(n);
  });

  // kafkajs refreshes metadata for every topic its producer ever sent to (tulios/kafkajs#1622): a
  // deleted one used to be re-created by each refresh (broker auto-create on), or to fail every
  // later send of the worker (auto-create off).
  it('a client inbox deleted on close stays deleted, and the next clients are answered', async () => {
    const settings = kafkaSettings();
    const model = uniqueName('inbox').replace(/-/g, '');
    const t = track(new KafkaTransport(settings, { partitions: 1 }));
    await t.start({
      subscriptions: [{ model, priorityLevels: 1 }],
      onDeliveries: (ds) => void t.settle(ds.map(outcomeFor)),
    });
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      const closedInboxes: string[] = [];
      for (let i = 0; i < 3; i++) {
        const client = new KafkaProducer(settings, { clientId: `${model}-client${i}`, partitions: 1 });
        const startedAt = Date.now();
        const result = await client.request(makeRequest(model, `c${i}`, 0), { timeoutMs: 15_000 }).finally(() => client.close());
        expect(result.status).toBe('ok');
        // A send held up by kafkajs retrying a refresh that names the deleted inbox takes ~5 s.
        expect(Date.now() - startedAt).toBeLessThan(3_000);
        closedInboxes.push(client.inbox);
      }
      const topics = new Set(await admin.listTopics());
      expect(closedInboxes.filter((inbox) => topics.has(inbox))).toEqual([]);
    } finally {
      await admin.disconnect();
    }
  });

  it('a reply topic deleted after use is created again for a later result, and sends to others do not stall', async () => {
    const settings = kafkaSettings();
    const model = uniqueName('regone').replace(/-/g, '');
    const replyTo = uniqueName('regone-replies');
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    await producer.publish(['first', 'second', 'third'].map((id) => makeRequest(model, id, 0, { replyTo })));
    const t = track(new KafkaTransport(settings, { partitions: 1 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const [first, second, third] = (await inbox.waitFor(3, 30_000)).map(outcomeFor);
    await t.settle([first as Outcome]);
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      await admin.deleteTopics({ topics: [replyTo] });
      // A new reply topic makes kafkajs refresh every topic its producer knows, the deleted one too.
      const startedAt = Date.now();
      await t.settle([{ ...(second as Outcome), replyTo: `${replyTo}-other` }]);
      await t.settle([third as Outcome]);
      expect(Date.now() - startedAt).toBeLessThan(3_000);
    } finally {
      await admin.disconnect();
    }
    expect((await readTopic(`${replyTo}-other`, 1, 10_000)).map((m) => decodeResult(m.value).id)).toEqual(['second']);
    expect((await readTopic(replyTo, 1, 10_000)).map((m) => decodeResult(m.value).id)).toEqual(['third']);
  });

  it('a request topic deleted under a running worker is created again, and the other priorities keep being served', async () => {
    const settings = kafkaSettings();
    const model = uniqueName('reqgone').replace(/-/g, '');
    const t = track(new KafkaTransport(settings, { partitions: 1 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const lowest = `${model}.requests.p${PRIORITY_LEVELS - 1}`;
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      await admin.deleteTopics({ topics: [lowest] });
    } finally {
      await admin.disconnect();
    }
    // Before, kafkajs restarted its consumer every 100 ms, failing each time on the missing topic,
    // and delivered nothing from the topics that were still there.
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    await producer.publish([makeRequest(model, 'urgent', 0)]);
    expect((await inbox.waitFor(1, 20_000)).map(idOf)).toEqual(['urgent']);
    const check = adminKafka().admin();
    await check.connect();
    try {
      expect(await check.listTopics()).toContain(lowest);
    } finally {
      await check.disconnect();
    }
    await producer.publish([makeRequest(model, 'bulk', PRIORITY_LEVELS - 1)]);
    expect((await inbox.waitFor(2, 20_000)).map(idOf)).toEqual(['urgent', 'bulk']);
  }, 60_000);

  // Kafka refuses a topic whose name differs from an existing one only in '.' vs '_' (they would
  // collide in metric names): a legal-looking replyTo (a typo, or a hostile producer) the worker
  // can never create. Its refusal was reported as retriable, so the runtime retried the whole
  // settle batch for ever: the neighbours went unanswered and the partition never committed.
  it.each([
    ['at-least-once', false],
    ['exactly-once', true],
  ])('a reply topic the broker refuses to create fails only its own request (failed result + DLQ), not the batch settled with it (%s)', async (_mode, exactlyOnce) => {
    const settings = kafkaSettings({ exactlyOnce });
    const model = uniqueName('rtbad').replace(/-/g, '');
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      await createTopicsSettled(admin, [{ topic: `${model}.rt`, numPartitions: 1 }]);
    } finally {
      await admin.disconnect();
    }
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    await producer.publish([
      makeRequest(model, 'r0', 0),
      makeRequest(model, 'r1', 0, { replyTo: `${model}_rt` }),
      makeRequest(model, 'r2', 0),
    ]);
    const t = track(new KafkaTransport(settings, { partitions: 1 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const deliveries = await inbox.waitFor(3, 30_000);

    const direct = await t.settle(deliveries.map(outcomeFor)).then(
      () => undefined,
      (err: unknown) => err as FleetError,
    );
    expect(direct?.retriable).toBe(false);
    expect(direct?.message).toContain(`${model}_rt`);

    const publisher = new OutcomePublisher(t, createLogger({ level: 'silent' }), 1);
    for (const d of deliveries) publisher.push(outcomeFor(d));
    await Promise.race([publisher.flush(), sleep(30_000).then(() => Promise.reject(new Error('flush did not finish: the batch is stalled')))]);
    expect(await committed(settings.groupId, `${model}.requests.p0`)).toBe(3);
    const replies = (await readTopic(`${model}.replies`, 3, 30_000)).map((m) => decodeResult(m.value) as ResultEnvelope);
    const byId = new Map(replies.map((r) => [r.id, r]));
    expect(byId.get('r0')?.status).toBe('ok');
    expect(byId.get('r2')?.status).toBe('ok');
    expect(byId.get('r1')?.status).toBe('failed');
    expect(byId.get('r1')?.error?.message).toContain(`${model}_rt`);
    const [dead] = await readTopic(`${model}.dlq`, 1, 30_000);
    expect(dead?.headers[HEADERS.dlqMessage]).toContain(`${model}_rt`);
  }, 120_000);

  // Any legal replyTo a request names is created on first use; a client naming a fresh topic per
  // request slowed every result of the worker (~150 ms each) and piled up topics. With
  // transport.kafka.replyTopicPattern such a request is dead-lettered and no topic is created.
  it('with replyTopicPattern, a replyTo outside it creates no topic: its request is dead-lettered, the others are answered', async () => {
    const model = uniqueName('rtpat').replace(/-/g, '');
    const open = kafkaSettings();
    const guarded = kafkaSettings({ groupId: open.groupId, replyTopicPattern: `${model}\\.ok` });
    // Published by a producer not given the pattern (it would refuse r1 itself).
    const producer = track(new KafkaProducer(open, { partitions: 1 }));
    await producer.publish([makeRequest(model, 'r0', 0, { replyTo: `${model}.ok` }), makeRequest(model, 'r1', 0, { replyTo: `${model}.fresh7f3a` })]);
    const t = track(new KafkaTransport(guarded, { partitions: 1 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const deliveries = await inbox.waitFor(2, 30_000);
    const publisher = new OutcomePublisher(t, createLogger({ level: 'silent' }), 1);
    for (const d of deliveries) publisher.push(outcomeFor(d));
    await publisher.flush();
    expect((await readTopic(`${model}.ok`, 1, 30_000)).map((m) => decodeResult(m.value).id)).toEqual(['r0']);
    const [dead] = await readTopic(`${model}.dlq`, 1, 30_000);
    expect(String(dead?.headers[HEADERS.dlqReason])).toBe('INVALID_ARGUMENT');
    expect(String(dead?.headers[HEADERS.dlqMessage])).toContain(`replyTo "${model}.fresh7f3a" does not match transport.kafka.replyTopicPattern`);
    expect(await committed(guarded.groupId, `${model}.requests.p0`)).toBe(2);
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      expect((await admin.listTopics()).filter((n) => n.startsWith(`${model}.fresh`))).toEqual([]);
    } finally {
      await admin.disconnect();
    }
  }, 120_000);

  // Request topics for big inputs are made with a larger max.message.bytes than the broker default
  // (the fleet takes messages up to limits.maxMessageBytes, 64 MiB), while the worker creates the
  // DLQ topic with the default (1 MiB). A DLQ record carrying such a request's bytes was refused
  // for good, its replacement too (it carries the same bytes), and the runtime retried it for ever:
  // the partition never committed again and the drain hung.
  it.each([
    ['at-least-once', false],
    ['exactly-once', true],
  ])('a request too big for the DLQ topic is dead-lettered without its bytes, naming where they are, and does not stall its partition (%s)', async (_mode, exactlyOnce) => {
    const settings = kafkaSettings({ exactlyOnce });
    const model = uniqueName('bigdlq').replace(/-/g, '');
    const topic = `${model}.requests.p0`;
    const kafka = adminKafka();
    const admin = kafka.admin();
    const raw = kafka.producer();
    await admin.connect();
    await raw.connect();
    try {
      await createTopicsSettled(admin, [{ topic, numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: String(8 * 1024 * 1024) }] }]);
      // 2 MiB that decode as nothing: answered `invalid`, with a DLQ record of the original bytes.
      await raw.send({ topic, messages: [{ key: 'junk', value: Buffer.alloc(2 * 1024 * 1024, 7) }] });
    } finally {
      await raw.disconnect();
      await admin.disconnect();
    }
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    await producer.publish([makeRequest(model, 'after', 0)]);
    const t = track(new KafkaTransport(settings, { partitions: 1 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const deliveries = await inbox.waitFor(2, 30_000);

    const publisher = new OutcomePublisher(t, createLogger({ level: 'silent' }), 1);
    for (const d of deliveries) publisher.push(outcomeFor(d));
    await Promise.race([publisher.flush(), sleep(30_000).then(() => Promise.reject(new Error('flush did not finish: the partition is stalled')))]);
    expect(await committed(settings.groupId, topic)).toBe(2);
    const [dead] = await readTopic(`${model}.dlq`, 1, 30_000);
    expect(dead?.value.length).toBe(0);
    expect(dead?.headers[HEADERS.dlqSource]).toBe(`${topic}/0/0`);
    expect(dead?.headers[HEADERS.dlqValueDropped]).toMatch(/2097152 bytes/);
  }, 120_000);

  // Settles that arrive while a send is in flight leave together; when the broker refuses one of
  // them (a result over its size limit) the others are sent again one settle at a time. Those
  // already acknowledged in an earlier chunk of the joint send were published twice.
  it('a result refused in a coalesced send does not make the results sent with it go out twice', async () => {
    const settings = kafkaSettings();
    const model = uniqueName('coal').replace(/-/g, '');
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    await producer.publish(['x', 'b', 'a'].map((id) => makeRequest(model, id, 0)));
    const t = track(new KafkaTransport(settings, { partitions: 1 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const [x, b, a] = (await inbox.waitFor(3, 30_000)).map(outcomeFor) as [Outcome, Outcome, Outcome];
    const huge = { name: 'y', dtype: 'float32' as const, shape: [1, 524_288], data: new Uint8Array(2 * 1024 * 1024) };
    // x is in flight while b and a queue: b and a leave in one send, b's chunk first.
    const settles = [t.settle([x]), t.settle([b]), t.settle([{ ...a, result: { ...a.result, outputs: [huge] } }])];
    expect((await Promise.allSettled(settles)).map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'rejected']);
    await t.settle([a]);
    // Waits for a 4th record that must not come.
    const ids = (await readTopic(`${model}.replies`, 4, 5_000)).map((m) => decodeResult(m.value).id);
    expect(ids.sort()).toEqual(['a', 'b', 'x']);
  }, 60_000);

  // The runtime settles a refused batch again one outcome at a time: a result the brokers had
  // acknowledged in an earlier chunk of the refused settle was published a second time.
  it('a result refused within one settle does not make the results acknowledged before it go out twice when settled again', async () => {
    const settings = kafkaSettings();
    const model = uniqueName('apart').replace(/-/g, '');
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    await producer.publish(['g', 'h'].map((id) => makeRequest(model, id, 0)));
    const t = track(new KafkaTransport(settings, { partitions: 1 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const [g, h] = (await inbox.waitFor(2, 30_000)).map(outcomeFor) as [Outcome, Outcome];
    const huge = { name: 'y', dtype: 'float32' as const, shape: [1, 524_288], data: new Uint8Array(2 * 1024 * 1024) };
    await expect(t.settle([g, { ...h, result: { ...h.result, outputs: [huge] } }])).rejects.toMatchObject({ retriable: false });
    await t.settle([g]);
    await t.settle([h]);
    expect(await committed(settings.groupId, `${model}.requests.p0`)).toBe(2);
    // Waits for a 3rd record that must not come.
    const ids = (await readTopic(`${model}.replies`, 3, 5_000)).map((m) => decodeResult(m.value).id);
    expect(ids.sort()).toEqual(['g', 'h']);
  }, 60_000);
});
