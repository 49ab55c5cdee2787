// Reply topics a worker creates on first use: their creation must not hold up results for topics
// that exist (real broker; each creation costs the broker a round of controller work).
import { describe, expect, it } from 'vitest';
import { decodeResult } from '../../../src/codec/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { OutcomePublisher } from '../../../src/runtime/outcome-publisher.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import type { Delivery } from '../../../src/transport/transport.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { idOf, Inbox, makeRequest, outcomeFor, sleep, startWith } from './conformance-kit.ts';
import { adminKafka, committed, kafkaSettings } from './kafka-harness.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';

const track = closeAfterEach();

function percentile(values: readonly number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
}

/** How long the broker takes to create one topic (with its leaders), as the worker does it. */
async function creationMs(partitions: number): Promise<number> {
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    const started = performance.now();
    await createTopicsSettled(admin, [{ topic: uniqueName('creation-probe'), numPartitions: partitions }]);
    return performance.now() - started;
  } finally {
    await admin.disconnect();
  }
}

/** Every message of the topics matching `pattern` (which exist by now), by topic, read until `count` arrived and then `quietMs` more. */
async function readAll(pattern: RegExp, count: number, timeoutMs: number, quietMs: number): Promise<Map<string, string[]>> {
  const consumer = adminKafka().consumer({ groupId: uniqueName('creation-reader'), maxWaitTimeInMs: 100 });
  const byTopic = new Map<string, string[]>();
  let seen = 0;
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [pattern], fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ topic, message }) => {
        const list = byTopic.get(topic) ?? [];
        list.push(decodeResult(message.value ?? Buffer.alloc(0)).id);
        byTopic.set(topic, list);
        seen++;
      },
    });
    const deadline = Date.now() + timeoutMs;
    while (seen < count && Date.now() < deadline) await sleep(50);
    // Long enough for a duplicate to show up.
    await sleep(quietMs);
  } finally {
    await consumer.disconnect();
  }
  return byTopic;
}

interface Run {
  /** Settle latencies of results to the existing topic alone, then alongside the new topics. */
  readonly aloneMs: number[];
  readonly alongsideMs: number[];
  readonly oneCreationMs: number;
  /** Checks that every result went out once and every offset was committed. */
  readonly checkDelivered: () => Promise<void>;
}

/**
 * One settle per result as results come off a device: one result to the model's replies topic
 * (it exists) every 10 ms, first alone (the baseline of the machine as loaded now), then with a
 * second stream beside it, one result every 40 ms to a reply topic of its own that the broker does
 * not have yet.
 */
async function runStreams(exactlyOnce: boolean): Promise<Run> {
  const settings = kafkaSettings({ exactlyOnce });
  const model = uniqueName('replycreate').replace(/-/g, '');
  const warmUp = 5;
  const alone = 60;
  const steady = warmUp + alone + 120;
  const fresh = 30;
  const partitions = 2;
  const inboxOf = (i: number): string => `${model}.inbox.${i}`;
  const producer = track(new KafkaProducer(settings, { partitions: 1 }));
  await producer.publish([
    ...Array.from({ length: steady }, (_, i) => makeRequest(model, `s${i}`, 0)),
    ...Array.from({ length: fresh }, (_, i) => makeRequest(model, `f${i}`, 0, { replyTo: inboxOf(i) })),
  ]);
  const oneCreationMs = await creationMs(partitions);

  const t = track(new KafkaTransport(settings, { partitions }));
  const inbox = new Inbox();
  await startWith(t, model, inbox);
  const got = await inbox.waitFor(steady + fresh, 30_000);
  const steadyDeliveries = got.filter((d) => idOf(d).startsWith('s'));
  const freshDeliveries = got.filter((d) => idOf(d).startsWith('f'));
  // A producer's first sends fetch metadata and open connections: not what is measured here.
  for (const d of steadyDeliveries.slice(0, warmUp)) await t.settle([outcomeFor(d)]);

  const timed = (into: number[]) => async (d: Delivery): Promise<void> => {
    const started = performance.now();
    await t.settle([outcomeFor(d)]);
    into.push(performance.now() - started);
  };
  const stream = async (list: readonly Delivery[], everyMs: number, settle: (d: Delivery) => Promise<void>): Promise<void> => {
    const settles: Array<Promise<void>> = [];
    for (const d of list) {
      settles.push(settle(d));
      await sleep(everyMs);
    }
    await Promise.all(settles);
  };
  const aloneMs: number[] = [];
  const alongsideMs: number[] = [];
  await stream(steadyDeliveries.slice(warmUp, warmUp + alone), 10, timed(aloneMs));
  await Promise.all([stream(steadyDeliveries.slice(warmUp + alone), 10, timed(alongsideMs)), stream(freshDeliveries, 40, (d) => t.settle([outcomeFor(d)]))]);
  expect(alongsideMs).toHaveLength(steady - warmUp - alone);

  const checkDelivered = async (): Promise<void> => {
    const results = await readAll(new RegExp(`^${model}\\.(replies|inbox\\.\\d+)$`), steady + fresh, 20_000, 1_500);
    expect([...(results.get(`${model}.replies`) ?? [])].sort()).toEqual(steadyDeliveries.map(idOf).sort());
    for (let i = 0; i < fresh; i++) expect(results.get(inboxOf(i)), inboxOf(i)).toEqual([`f${i}`]);
    expect(results.size).toBe(1 + fresh);
    expect(await committed(settings.groupId, `${model}.requests.p0`)).toBe(steady + fresh);
  };
  return { aloneMs, alongsideMs, oneCreationMs, checkDelivered };
}

/** Each record's id with the broker's append time (the topic logs LogAppendTime): when it became readable. */
async function appendTimes(topic: string, count: number, timeoutMs: number): Promise<Map<string, number[]>> {
  const consumer = adminKafka().consumer({ groupId: uniqueName('append-reader'), maxWaitTimeInMs: 100 });
  const byId = new Map<string, number[]>();
  let seen = 0;
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => {
        const id = decodeResult(message.value ?? Buffer.alloc(0)).id;
        byId.set(id, [...(byId.get(id) ?? []), Number(message.timestamp)]);
        seen++;
      },
    });
    const deadline = Date.now() + timeoutMs;
    while (seen < count && Date.now() < deadline) await sleep(50);
    await sleep(500);
  } finally {
    await consumer.disconnect();
  }
  return byId;
}

/**
 * Through the runtime's OutcomePublisher (4 settles at once), as a worker publishes: a stream of
 * results for the model's replies topic (it exists), one every 10 ms, first alone, then right after
 * results for `fresh` reply topics the broker does not have yet, each settled in a batch of its own
 * (clients starting together, each naming its own reply topic). Latency: from the push to the
 * broker's append time of the result, i.e. until it is readable.
 */
async function runThroughPublisher(
  fresh: number,
  exactlyOnce = false,
): Promise<{ aloneMs: number[]; alongsideMs: number[]; oneCreationMs: number; committedAt: number; total: number }> {
  const settings = kafkaSettings({ exactlyOnce });
  const model = uniqueName('replyslots').replace(/-/g, '');
  const partitions = 2;
  const warmUp = 5;
  const perStream = 40;
  const steady = warmUp + 2 * perStream;
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    await createTopicsSettled(admin, [{ topic: `${model}.replies`, numPartitions: partitions, configEntries: [{ name: 'message.timestamp.type', value: 'LogAppendTime' }] }]);
  } finally {
    await admin.disconnect();
  }
  const producer = track(new KafkaProducer(settings, { partitions: 1 }));
  await producer.publish([
    ...Array.from({ length: steady }, (_, i) => makeRequest(model, `s${i}`, 0)),
    ...Array.from({ length: fresh }, (_, i) => makeRequest(model, `f${i}`, 0, { replyTo: `${model}.fresh.${i}` })),
  ]);
  const oneCreationMs = await creationMs(partitions);
  const t = track(new KafkaTransport(settings, { partitions }));
  const inbox = new Inbox();
  await startWith(t, model, inbox);
  const got = await inbox.waitFor(steady + fresh, 30_000);
  const steadyOnes = got.filter((d) => idOf(d).startsWith('s'));
  const freshOnes = got.filter((d) => idOf(d).startsWith('f'));
  const publisher = new OutcomePublisher(t, createLogger({ level: 'silent' }), 1, 500, () => undefined, 4);
  for (const d of steadyOnes.slice(0, warmUp)) publisher.push(outcomeFor(d));
  await publisher.flush();

  const pushedAt = new Map<string, number>();
  const stream = async (list: readonly Delivery[]): Promise<void> => {
    for (const d of list) {
      pushedAt.set(idOf(d), Date.now());
      publisher.push(outcomeFor(d));
      await sleep(10);
    }
  };
  await stream(steadyOnes.slice(warmUp, warmUp + perStream));
  await publisher.flush();
  for (const d of freshOnes) {
    publisher.push(outcomeFor(d));
    await sleep(5);
  }
  await stream(steadyOnes.slice(warmUp + perStream));
  await publisher.flush();
  const committedAt = await committed(settings.groupId, `${model}.requests.p0`);

  const appended = await appendTimes(`${model}.replies`, steady, 20_000);
  const freshResults = await readAll(new RegExp(`^${model}\\.fresh\\.\\d+$`), fresh, 20_000, 500);
  for (let i = 0; i < fresh; i++) expect(freshResults.get(`${model}.fresh.${i}`), `fresh ${i}`).toEqual([`f${i}`]);
  const latency = (list: readonly Delivery[]): number[] =>
    list.map((d) => {
      const times = appended.get(idOf(d)) ?? [];
      expect(times.length, idOf(d)).toBeGreaterThanOrEqual(1);
      return Math.min(...times) - (pushedAt.get(idOf(d)) ?? NaN);
    });
  return {
    aloneMs: latency(steadyOnes.slice(warmUp, warmUp + perStream)),
    alongsideMs: latency(steadyOnes.slice(warmUp + perStream)),
    oneCreationMs,
    committedAt,
    total: steady + fresh,
  };
}

describe('kafka reply topic creation', () => {
  it('through the runtime publisher: settles waiting for new reply topics do not hold its settle slots; results for an existing topic stay readable at once', async () => {
    const run = await runThroughPublisher(8);
    const [median, max] = [percentile(run.alongsideMs, 50), percentile(run.alongsideMs, 100)];
    const [baseMedian, baseMax] = [percentile(run.aloneMs, 50), percentile(run.aloneMs, 100)];
    const seen = `existing-topic push-to-readable median ${median.toFixed(0)} ms, max ${max.toFixed(0)} ms (alone: ${baseMedian.toFixed(0)}, ${baseMax.toFixed(0)} ms); one creation ${run.oneCreationMs.toFixed(0)} ms`;
    console.log(seen);
    expect(median, seen).toBeLessThan(baseMedian + run.oneCreationMs / 2);
    expect(run.committedAt).toBe(run.total);
  });

  // A transaction takes a partition's contiguous settled prefix only: a settle waiting for its new
  // reply topic holding a slot waited for results queued behind it in the publisher, for good.
  // Before (8 new topics, 4 slots held): timed out after 60 s, 2 of 2 runs; with the slots given up
  // but bounded at 16 (24 new topics) too. Timings are not asserted: each settle waits for its
  // transaction (alone on this machine: median 28-300 ms), whatever the creations.
  it('exactly-once, through the runtime publisher: many new reply topics at once do not hang the settles', async () => {
    const run = await runThroughPublisher(24, true);
    const [median, max] = [percentile(run.alongsideMs, 50), percentile(run.alongsideMs, 100)];
    const [baseMedian, baseMax] = [percentile(run.aloneMs, 50), percentile(run.aloneMs, 100)];
    const seen = `exactly-once existing-topic push-to-readable median ${median.toFixed(0)} ms, max ${max.toFixed(0)} ms (alone: ${baseMedian.toFixed(0)}, ${baseMax.toFixed(0)} ms); one creation ${run.oneCreationMs.toFixed(0)} ms`;
    console.log(seen);
    expect(run.committedAt).toBe(run.total);
  });

  it('results for an existing reply topic keep flowing while new reply topics are created; each result goes out once', async () => {
    const { aloneMs, alongsideMs, oneCreationMs, checkDelivered } = await runStreams(false);
    // Before, each result waited for the creations ahead of it: median ~330 ms (baseline ~10 ms,
    // one creation ~140 ms, 2-core machine under load ~7). Now a creation costs the shared send
    // path one metadata round trip and one send, not the creation.
    const [median, p75] = [percentile(alongsideMs, 50), percentile(alongsideMs, 75)];
    const [baseMedian, baseP75] = [percentile(aloneMs, 50), percentile(aloneMs, 75)];
    const seen = `existing-topic settle median ${median.toFixed(0)} ms, p75 ${p75.toFixed(0)} ms (alone: ${baseMedian.toFixed(0)}, ${baseP75.toFixed(0)} ms); one creation ${oneCreationMs.toFixed(0)} ms`;
    console.log(seen);
    expect(median, seen).toBeLessThan(baseMedian + oneCreationMs);
    expect(p75, seen).toBeLessThan(baseP75 + 1.5 * oneCreationMs);
    // Before, also: a first send to a topic just created was refused until its leader served it,
    // and kafkajs sent the whole request again, results of the replies topic included.
    await checkDelivered();
  });

  // Timings are not asserted here: transactions run one at a time, and on a loaded machine their
  // round trips alone come close to a creation's time (measured: median ~70 ms after, ~135 ms
  // before), too close to tell apart reliably.
  it('exactly-once: results waiting for a new reply topic join a later transaction; each result goes out once and every offset commits', async () => {
    await (await runStreams(true)).checkDelivered();
  });
});
