// A request() client that closed with requests unanswered deleted its private inbox: a worker that
// answers them later must not create that topic again (nothing would ever delete it), and must not
// lose the results either (real broker).
import { describe, expect, it } from 'vitest';
import { decodeResult } from '../../../src/codec/index.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
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
});
