// Exactly-once: the broker commits a transaction but its answer to the commit (EndTxn) never
// reaches the worker, as when the broker dies, or the connection times out, right after it wrote
// the commit. kafkajs sends EndTxn once and reports the lost answer as a failure, which the worker
// cannot tell from a commit that never arrived; the results of that transaction must not be
// written again when their settle is retried. The committer runs here on the real broker with a
// real transactional producer and the group's offsets as the broker has them.
import { Kafka, logLevel, type ISocketFactory, type Producer } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeResult } from '../../../src/codec/index.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { committedOffsetsVia, TransactionalCommitter, type EosPayload, type TrackedPartition } from '../../../src/transport/kafka/kafka-eos.ts';
import type { OutgoingMessage } from '../../../src/transport/kafka/kafka-outcomes.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import { PartitionTracker } from '../../../src/transport/kafka/partition-tracker.ts';
import type { Delivery } from '../../../src/transport/transport.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { idOf, Inbox, makeRequest, outcomeFor, startWith } from './conformance-kit.ts';
import { adminKafka, committed, kafkaSettings } from './kafka-harness.ts';
import { readCommitted, transactionsSettled } from './kafka-topic-reader.ts';
import { requestSniffingFactory } from './produce-sniffer.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

/** Kafka's api key of an EndTxn request. */
const END_TXN_API_KEY = 26;

/**
 * Real TCP connections to the real broker. Once armed, the next EndTxn that commits (its last
 * byte, `committed`, is 1 in the versions kafkajs sends) is lost: `answer`, it goes to the broker
 * and its connection then reads nothing more and is closed `lostAfterMs` later (the broker has
 * committed, the client never hears so); `request`, it never leaves and the connection is closed
 * (the transaction stays open until the coordinator aborts it).
 */
function commitLosingFactory(what: 'answer' | 'request', lostAfterMs: number): { factory: ISocketFactory; arm(): void; lost(): number } {
  let armed = false;
  let lost = 0;
  const commits = (request: Buffer, whole: boolean): boolean => whole && request.readInt16BE(4) === END_TXN_API_KEY && request[request.length - 1] === 1;
  const factory = requestSniffingFactory('commitLosing', commits, (socket, commit, forward) => {
    if (!commit || !armed) return forward();
    armed = false;
    lost++;
    socket.pause();
    setTimeout(() => socket.destroy(new Error(`test: the ${what} of the commit was lost`)), lostAfterMs);
    return what === 'answer' ? forward() : true;
  });
  return { factory, arm: () => void (armed = true), lost: () => lost };
}

/** What the runtime's OutcomePublisher does: a retriable failure is settled again, until done. Each attempt's outcome. */
async function settleUntilDone(settleOnce: () => Promise<unknown>): Promise<string[]> {
  const attempts: string[] = [];
  for (let attempt = 1; ; attempt++) {
    const error = await settleOnce().then(
      () => undefined,
      (e: unknown) => e,
    );
    attempts.push(error === undefined ? 'ok' : (error as Error).message.slice(0, 120));
    if (error === undefined) return attempts;
    expect(error).toBeInstanceOf(FleetError);
    expect((error as FleetError).retriable).toBe(true);
    expect(attempt).toBeLessThan(5);
  }
}

/**
 * l0 is committed; the commit of l1's transaction is lost (`what`); its settle is retried until
 * done, then l2 is settled. Each must be written once.
 */
async function lostCommit(what: 'answer' | 'request'): Promise<void> {
  const requests = uniqueName('eoslost-requests');
  const replies = uniqueName('eoslost-replies');
  const groupId = uniqueName('eoslost-group');
  const transactionalId = uniqueName('eoslost-txn');
  const admin = adminKafka().admin();
  await admin.connect();
  cleanups.push(() => admin.disconnect());
  await createTopicsSettled(admin, [{ topic: requests, numPartitions: 1 }, { topic: replies, numPartitions: 1 }]);

  const lossy = commitLosingFactory(what, 500);
  const kafka = new Kafka({ clientId: 'eoslost', brokers: getServices().kafkaBrokers, logLevel: logLevel.NOTHING, socketFactory: lossy.factory, retry: { retries: 3 } });
  const open = async (): Promise<Producer> => {
    const p = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
    await p.connect();
    cleanups.push(() => p.disconnect());
    return p;
  };
  // As the worker's ResultSender does: a failed transaction's producer is replaced before the next.
  let producer = await open();
  let renew = false;
  const producers = {
    async withProducer<T>(_topics: readonly string[], work: (p: Producer) => Promise<T>): Promise<T> {
      if (renew) {
        renew = false;
        producer = await open();
      }
      return work(producer);
    },
    renewProducer: () => void (renew = true),
    routed: (messages: readonly OutgoingMessage[]) => messages,
  };
  // The transport's lookup, through an admin client as the transport's.
  const committedOffsets = committedOffsetsVia(admin);
  const tracker = new PartitionTracker<EosPayload>();
  const tp: TrackedPartition = { topic: requests, partition: 0, tracker };
  const committer = new TransactionalCommitter(groupId, () => [tp], producers, committedOffsets);
  cleanups.push(() => committer.close());
  for (const offset of [0, 1, 2]) tracker.deliver(offset);

  // As KafkaTransport settles a delivery in exactly-once mode (placeForTransaction): a failure
  // re-opens it, to be settled again.
  const settle = (offset: number, id: string): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      tracker.settle(offset, {
        messages: [{ topic: replies, message: { key: id, value: id } }],
        resolve,
        dropped: resolve,
        reject: (error: FleetError) => {
          tracker.unsettle(offset);
          reject(error);
        },
      });
      committer.kick();
    });

  await settle(0, 'l0');
  lossy.arm();
  const attempts = await settleUntilDone(() => settle(1, 'l1'));
  console.log(`lost commit ${what}: ${lossy.lost()} lost; settle of l1: ${attempts.join(' | ')}`);
  expect(lossy.lost()).toBe(1);
  await settle(2, 'l2');

  // A commit returns before its markers are written (its offsets are not visible until then).
  await transactionsSettled(transactionalId);
  expect((await committedOffsets(groupId, [tp])).get(`${requests}/0`)).toBe(3);
  const written = (await readCommitted(replies)).map((m) => m.value?.toString());
  expect(written).toEqual(['l0', 'l1', 'l2']);
}

describe('kafka exactly-once committer: a commit that gets no answer', () => {
  it('committed, its answer lost: its results are not written again by the settle retried after it', async () => {
    await lostCommit('answer');
  });

  it('never reaching the broker: its results are written by the settle retried after it, once', async () => {
    await lostCommit('request');
  });
});

describe('kafka transport, exactly-once: a commit whose answer is lost', () => {
  // The transport hands its committer the group's offsets as the broker has them (committedOffsetsVia):
  // without them, l1's retried settle wrote l1 again (replies l0,l1,l1,l2).
  it('its results are not written again by the settle retried after it', async () => {
    const settings = kafkaSettings({ exactlyOnce: true });
    const model = uniqueName('eoslosttx').replace(/-/g, '');
    const ids = ['l0', 'l1', 'l2'];
    const producer = new KafkaProducer(settings, { partitions: 1 });
    cleanups.push(() => producer.close());
    await producer.publish(ids.map((id) => makeRequest(model, id, 0)));
    const lossy = commitLosingFactory('answer', 500);
    const t = new KafkaTransport(settings, { partitions: 1, instanceId: 'a', socketFactory: lossy.factory });
    cleanups.push(() => t.close());
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const [l0, l1, l2] = (await inbox.waitFor(ids.length, 30_000)) as [Delivery, Delivery, Delivery];
    expect([l0, l1, l2].map(idOf)).toEqual(ids);

    await t.settle([outcomeFor(l0)]);
    lossy.arm();
    const attempts = await settleUntilDone(() => t.settle([outcomeFor(l1)]));
    await t.settle([outcomeFor(l2)]);
    expect(lossy.lost()).toBe(1);

    // A commit returns before its markers are written (its offsets are not visible until then).
    await transactionsSettled(`${settings.clientId}.${settings.groupId}.a`);
    const written = (await readCommitted(`${model}.replies`)).map((m) => decodeResult(m.value ?? new Uint8Array()).id);
    console.log(`transport, lost commit answer: settle of l1: ${attempts.join(' | ')}; replies ${written.join(',')}`);
    expect(written).toEqual(ids);
    expect(await committed(settings.groupId, `${model}.requests.p0`)).toBe(ids.length);
  }, 60_000);
});
