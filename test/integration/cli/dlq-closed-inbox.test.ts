// Kafka: `dlq replay` of dead letters whose replyTo is a closed request() client's private inbox
// (deleted as the client closed), and the replays fail again. QA: the DLQ grew from 8 to 24
// records instead of 16 (each replayed one written twice, ~420 ms apart), and the worker logged
// "kafka producer replaced: topics it had written to were deleted"; with exactlyOnce the settle
// failed with OPERATION_NOT_ATTEMPTED instead. Real Kafka.
import { describe, expect, it } from 'vitest';
import { decodeResult } from '../../../src/codec/index.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { KafkaDeadLetters } from '../../../src/transport/kafka/kafka-dead-letters.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import { HEADERS } from '../../../src/transport/names.ts';
import type { Delivery, Outcome } from '../../../src/transport/transport.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { idOf, Inbox, makeRequest, outcomeFor, sleep, startWith } from '../transport/conformance-kit.ts';
import { kafkaSettings, readTopic } from '../transport/kafka-harness.ts';

const track = closeAfterEach();

const N = 8;
const failed = (d: Delivery): Outcome => {
  const o = outcomeFor(d);
  const e = new FleetError('DEVICE_ERROR', 'device fault');
  return { ...o, result: { ...o.result, status: 'failed', outputs: undefined, error: e.toResultError() }, dlq: { reason: e.code, message: e.message } };
};

/** Java's String.hashCode. */
function javaHash(s: string): number {
  let h = 0;
  for (let i = 0; i < s.length; i++) h = (Math.imul(31, h) + s.charCodeAt(i)) | 0;
  return h;
}

/** The bucket of a 16-bucket java.util.HashMap keyed by `s`: its iteration order. */
const bucket = (s: string): number => {
  const h = javaHash(s);
  return (h ^ (h >>> 16)) & 15;
};

async function run(exactlyOnce: boolean): Promise<void> {
  const tag = uniqueName('dlqinboxcfg').replace(/[^A-Za-z0-9-]/g, '');
  const kafka = kafkaSettings({ exactlyOnce, topicTemplate: `${tag}.{model}.requests.p{priority}`, repliesTemplate: `${tag}.{model}.replies`, dlqTemplate: `${tag}.{model}.dlq` });
  let client = track(new KafkaProducer(kafka, { partitions: 2, clientId: `${tag}-client` }));
  while (bucket(client.inbox) === 0) client = track(new KafkaProducer(kafka, { partitions: 2, clientId: `${tag}-client` }));
  // The broker answers a failed AddPartitionsToTxn topic by topic in a HashMap's order of their
  // names, and kafkajs throws the first error: named so that the DLQ topic comes first, its
  // OPERATION_NOT_ATTEMPTED hides the deleted inbox's UNKNOWN_TOPIC_OR_PARTITION (as in the QA run).
  let model = uniqueName('dlqinbox').replace(/[^A-Za-z0-9-]/g, '');
  while (bucket(`${tag}.${model}.dlq`) >= bucket(client.inbox)) model = uniqueName('dlqinbox').replace(/[^A-Za-z0-9-]/g, '');
  const lines: string[] = [];
  const note = (level: string) => (o: unknown, m: string) => lines.push(`${level} ${m} ${JSON.stringify(o)}`);
  const logger = { error: note('error'), warn: note('warn'), info: note('info'), debug: () => undefined };
  const t = track(new KafkaTransport(kafka, { partitions: 2, retries: 1, logger }));
  const inbox = new Inbox();
  await startWith(t, model, inbox);
  // The first round writes to the client's inbox: the worker's producer then knows the topic.
  const replies = client.requestMany(
    Array.from({ length: N }, (_, i) => makeRequest(model, `r${i}`, 0)),
    { timeoutMs: 60_000 },
  );
  const first = await inbox.waitFor(N, 60_000);
  await t.settle(first.map(failed));
  expect((await Promise.all(replies)).map((r) => r.status)).toEqual(Array(N).fill('failed'));
  await client.close();

  const dl = track(new KafkaDeadLetters(kafka));
  const scannedOnce = async (want: number): Promise<number> => {
    let scanned = 0;
    for (const until = Date.now() + 20_000; Date.now() < until; await sleep(300)) {
      scanned = (await dl.list({ model })).scanned;
      if (scanned >= want) break;
    }
    return scanned;
  };
  expect(await scannedOnce(N)).toBe(N);
  expect((await dl.replay({ model })).replayed).toBe(N);
  const again = (await inbox.waitFor(2 * N, 60_000)).slice(N);
  expect(again.map(idOf).sort()).toEqual(first.map(idOf).sort());
  // One send of results for the deleted inbox and DLQ records: exactlyOnce failed it with OPERATION_NOT_ATTEMPTED.
  await t.settle(again.map(failed));
  expect(await scannedOnce(2 * N)).toBe(2 * N);
  // Held a while: the copies came ~420 ms after the first ones.
  await sleep(3_000);
  const log = lines.join('\n');
  // Before: 24 (each replayed one written twice).
  expect((await dl.list({ model })).scanned, log).toBe(2 * N);
  // The replays' results went to the model's replies topic, once each, saying whose inbox was gone.
  const rerouted = await readTopic(`${tag}.${model}.replies`, 2 * N, 3_000);
  expect(rerouted.map((m) => decodeResult(m.value).id).sort(), log).toEqual(first.map(idOf).sort());
  for (const m of rerouted) expect(m.headers[HEADERS.replyToGone]).toContain(client.inbox);
}

describe('dlq replay on kafka, replyTo a deleted inbox', () => {
  it('at-least-once: re-failed replays add one DLQ record each and one result each, no copies', async () => {
    await run(false);
  }, 180_000);

  it('exactly-once: the settle of re-failed replays commits one DLQ record and one result each', async () => {
    await run(true);
  }, 180_000);
});
