// A request() client that closed with requests unanswered deleted its private inbox: a worker that
// answers them later must not create that topic again (nothing would ever delete it), and must not
// lose the results either (real broker).
import { describe, expect, it } from 'vitest';
import { decodeResult } from '../../../src/codec/index.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import type { Delivery, Outcome } from '../../../src/transport/transport.ts';
import { HEADERS } from '../../../src/transport/names.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { idOf, Inbox, makeRequest, outcomeFor, sleep, startWith } from './conformance-kit.ts';
import { adminKafka, kafkaSettings, readTopic } from './kafka-harness.ts';

const track = closeAfterEach();

async function listTopics(): Promise<Set<string>> {
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    return new Set(await admin.listTopics());
  } finally {
    await admin.disconnect();
  }
}

/** Until none of `topics` is in the cluster's metadata any more (a deletion is not instant). */
async function untilGone(topics: readonly string[], timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const existing = await listTopics();
    const left = topics.filter((t) => existing.has(t));
    if (left.length === 0) return;
    if (Date.now() > deadline) throw new Error(`still there after ${timeoutMs} ms: ${left.join(', ')}`);
    await sleep(200);
  }
}

/**
 * `closed` clients each send one request and close before the worker answers it; one more client
 * stays open and awaits its reply. `answeredBefore`: each closed client first got an answer on
 * its inbox, so the worker has written to it (the common case: a client times out on some
 * requests of many) and learns of the deletion from its send failing, not from a first use.
 */
async function run(exactlyOnce: boolean, answeredBefore: boolean): Promise<void> {
  const settings = kafkaSettings({ exactlyOnce });
  const model = uniqueName('closedinbox').replace(/-/g, '');
  const closed = 3;
  const t = track(new KafkaTransport(settings, { partitions: 2, retries: 1 }));
  const inbox = new Inbox();
  await startWith(t, model, inbox);
  const clients = Array.from({ length: closed }, (_, i) => track(new KafkaProducer(settings, { partitions: 2, clientId: `${model}-c${i}` })));
  const live = track(new KafkaProducer(settings, { partitions: 2, clientId: `${model}-live` }));

  if (answeredBefore) {
    const first = clients.map((c, i) => c.request(makeRequest(model, `early${i}`, 0), { timeoutMs: 30_000 }));
    await t.settle((await inbox.waitFor(closed, 30_000)).map(outcomeFor));
    expect((await Promise.all(first)).map((r) => r.id)).toEqual(clients.map((_, i) => `early${i}`));
  }
  const before = inbox.all.length;
  const late = clients.map((c, i) => c.request(makeRequest(model, `late${i}`, 0), { timeoutMs: 60_000 }).catch((e: unknown) => e));
  const liveReply = live.request(makeRequest(model, 'live', 0), { timeoutMs: 60_000 });
  // Awaited below; handled now so a failure before that is reported as itself, not as a rejection nobody handled.
  liveReply.catch(() => undefined);
  const got = (await inbox.waitFor(before + closed + 1, 30_000)).slice(before);
  await Promise.all(clients.map((c) => c.close()));
  for (const err of await Promise.all(late)) expect(FleetError.is(err, 'CLOSED'), String(err)).toBe(true);
  const inboxes = clients.map((c) => c.inbox);
  await untilGone(inboxes);

  await t.settle(got.map(outcomeFor));
  expect((await liveReply).id).toBe('live');

  // Before the fix the worker created each closed client's inbox again for its result, and they
  // stayed: 3 of 3 here.
  const existing = await listTopics();
  expect(inboxes.filter((i) => existing.has(i))).toEqual([]);
  expect(existing.has(live.inbox)).toBe(true);

  // Nothing lost: the late results are on the model's replies topic, each saying whose inbox was gone.
  const replies = await readTopic(`${model}.replies`, closed, 20_000);
  const byId = new Map(replies.map((m) => [decodeResult(m.value).id, m.headers]));
  for (let i = 0; i < closed; i++) {
    const headers = byId.get(`late${i}`);
    expect(headers, `late${i}`).toBeDefined();
    expect(headers?.[HEADERS.replyToGone]).toContain(inboxes[i]);
    expect(headers?.[HEADERS.requestId]).toBe(`late${i}`);
  }
  expect(replies).toHaveLength(closed);
  expect(got.map(idOf).sort()).toEqual([...clients.map((_, i) => `late${i}`), 'live'].sort());
}

/** How many times each id is on `topic`, read past `expected` messages for 3 s so that copies show. */
async function copiesOn(topic: string, expected: number): Promise<Record<string, number>> {
  const ids = (await readTopic(topic, expected + 1, 3_000)).map((m) => decodeResult(m.value).id);
  return Object.fromEntries([...new Set(ids)].sort().map((id) => [id, ids.filter((x) => x === id).length]));
}

const once = (ids: readonly string[]): Record<string, number> => Object.fromEntries([...ids].sort().map((id) => [id, 1]));

describe('kafka: results for a closed client inbox', () => {
  it('a result for an inbox never written to goes to the model replies topic; the inbox is not created again', async () => {
    await run(false, false);
  });

  it('a result for an inbox written to before it was deleted goes to the model replies topic; the inbox is not created again', async () => {
    await run(false, true);
  });

  it('exactly-once: a result for a deleted inbox is committed to the model replies topic; the inbox is not created again', async () => {
    await run(true, true);
  });

  it('at-least-once: a send stalled on a deleted inbox writes the results and DLQ records it carried for other topics once', async () => {
    const settings = kafkaSettings();
    const model = uniqueName('stalledinbox').replace(/-/g, '');
    const t = track(new KafkaTransport(settings, { partitions: 2, retries: 1 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const closing = track(new KafkaProducer(settings, { partitions: 2, clientId: `${model}-closing` }));
    const live = track(new KafkaProducer(settings, { partitions: 2, clientId: `${model}-live` }));
    const failed = (d: Delivery): Outcome => ({ ...outcomeFor(d), dlq: { reason: 'DEVICE_ERROR', message: 'device fault' } });
    // The worker writes to every topic of the send below first: its producer keeps the closing
    // client's inbox in its metadata, and a topic new to it would have it look for the others.
    const early = [closing.request(makeRequest(model, 'early-c', 0), { timeoutMs: 30_000 }), live.request(makeRequest(model, 'early-l', 0), { timeoutMs: 30_000 })];
    await live.publish([makeRequest(model, 'early-p', 0)]);
    await t.settle((await inbox.waitFor(3, 30_000)).map((d) => (idOf(d) === 'early-p' ? failed(d) : outcomeFor(d))));
    await Promise.all(early);

    const liveIds = ['l0', 'l1', 'l2', 'l3'];
    const lateIds = ['c0', 'c1', 'c2', 'c3'];
    const plainIds = ['p0', 'p1', 'p2'];
    const liveReplies = liveIds.map((id) => live.request(makeRequest(model, id, 0), { timeoutMs: 60_000 }));
    liveReplies.forEach((r) => r.catch(() => undefined));
    const late = lateIds.map((id) => closing.request(makeRequest(model, id, 0), { timeoutMs: 60_000 }).catch((e: unknown) => e));
    await live.publish(plainIds.map((id) => makeRequest(model, id, 0)));
    const got = (await inbox.waitFor(3 + liveIds.length + lateIds.length + plainIds.length, 30_000)).slice(3);
    await closing.close();
    for (const err of await Promise.all(late)) expect(FleetError.is(err, 'CLOSED'), String(err)).toBe(true);
    await untilGone([closing.inbox]);

    // One settle, one send: the live client's results first (written before the send stalls on
    // the deleted inbox), then those for the deleted inbox, then results for the model's replies
    // topic with DLQ records.
    const rank = (d: Delivery): number => (liveIds.includes(idOf(d)) ? 0 : lateIds.includes(idOf(d)) ? 1 : 2);
    const ordered = [...got].sort((a, b) => rank(a) - rank(b));
    await t.settle(ordered.map((d) => (rank(d) === 2 ? failed(d) : outcomeFor(d))));
    expect((await Promise.all(liveReplies)).map((r) => r.id)).toEqual(liveIds);

    // Before: the whole send went again once the inbox was found gone, so every result and DLQ
    // record in it that the broker had written was written twice.
    expect(await copiesOn(live.inbox, 1 + liveIds.length)).toEqual(once(['early-l', ...liveIds]));
    expect(await copiesOn(`${model}.replies`, 1 + lateIds.length + plainIds.length)).toEqual(once(['early-p', ...lateIds, ...plainIds]));
    const dlq = (await readTopic(`${model}.dlq`, 2 + plainIds.length, 3_000)).map((m) => m.headers[HEADERS.dlqSource]);
    expect(dlq).toHaveLength(1 + plainIds.length);
    expect(new Set(dlq).size).toBe(1 + plainIds.length);
  });
});
