// KafkaTransport.connected() (what /readyz reports) when the consumer is in contact with its group
// but results cannot get out: the reply partitions' leader is unreachable for the producer.
//
// The test broker is one node, so its group coordinator and the reply partitions' leader are one
// process: freezing or stopping it silences the consumer too. The outage is made on the wire
// instead (ProduceOutage): the transport's connections that carry Produce requests are reset or
// go silent, everything else reaches the real broker. Tried and rejected: min.insync.replicas
// above the replication factor (Kafka 4 takes the writes anyway), a replica assignment to a broker
// that does not exist (refused), a deleted reply topic (the transport creates it again), and a
// topic whose max.message.bytes no result fits (a permanent refusal of one message by a broker
// that plainly answers; the runtime replaces such a result, see OutcomePublisher.settleApart).
import { describe, expect, it } from 'vitest';
import { decodeResult } from '../../../src/codec/index.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import { contactWindowFor } from '../../../src/transport/kafka/request-consumer.ts';
import type { Outcome } from '../../../src/transport/transport.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { Inbox, makeRequest, outcomeFor, sleep, startWith } from './conformance-kit.ts';
import { committed, kafkaSettings, readTopic } from './kafka-harness.ts';
import { ProduceOutage } from './produce-outage.ts';

const track = closeAfterEach();

/** A started transport whose produce traffic `outage` controls, holding one delivery to answer. */
async function workerHolding(name: string) {
  const settings = kafkaSettings();
  const model = uniqueName(name).replace(/-/g, '');
  const producer = track(new KafkaProducer(settings, { partitions: 1 }));
  await producer.publish([makeRequest(model, 'held', 0)]);
  const outage = track(new ProduceOutage());
  const t = track(new KafkaTransport(settings, { partitions: 1, retries: 2, socketFactory: outage.socketFactory }));
  const inbox = new Inbox();
  await startWith(t, model, inbox);
  const [delivery] = await inbox.waitFor(1, 30_000);
  const outcome: Outcome = outcomeFor(delivery!);
  return { t, outage, outcome, requestTopic: `${model}.requests.p0`, replies: `${model}.replies`, groupId: settings.groupId, ...contactWindowFor(settings) };
}

/** Polls connected() until it is false (or `limitMs` passed); the times it was true, in ms since `since`. */
async function untilUnready(t: KafkaTransport, since: number, limitMs: number): Promise<{ unreadyAfterMs: number | undefined; readyAtMs: number[] }> {
  const readyAtMs: number[] = [];
  while (Date.now() - since < limitMs) {
    if (!t.connected()) return { unreadyAfterMs: Date.now() - since, readyAtMs };
    readyAtMs.push(Date.now() - since);
    await sleep(100);
  }
  return { unreadyAfterMs: undefined, readyAtMs };
}

describe('kafka transport readiness', () => {
  it('sends failing (connections reset) and retried for longer than the contact window: unready; ready again at the first result that gets out', async () => {
    const w = await workerHolding('produce-reset');
    expect(w.t.connected()).toBe(true);
    w.outage.start('reset');
    // What OutcomePublisher does with a failed settle: try again after a short backoff.
    let failures = 0;
    let settled = false;
    const since = Date.now();
    const retrying = (async () => {
      while (!settled) {
        try {
          await w.t.settle([w.outcome]);
          settled = true;
        } catch (err) {
          if (err instanceof FleetError && err.code === 'CLOSED') return;
          failures++;
          await sleep(200);
        }
      }
    })();
    const { unreadyAfterMs, readyAtMs } = await untilUnready(w.t, since, w.contactWindowMs + 15_000);
    expect(settled).toBe(false);
    expect(failures).toBeGreaterThan(0);
    // Before: the consumer kept heartbeating, so connected() stayed true all along.
    expect(unreadyAfterMs).toBeDefined();
    expect(unreadyAfterMs!).toBeGreaterThanOrEqual(w.contactWindowMs);
    // A failed send is not an outage: ready through the window.
    expect(readyAtMs.some((ms) => ms >= w.contactWindowMs - 1_000)).toBe(true);
    await sleep(1_000);
    expect(w.t.connected()).toBe(false);

    w.outage.stop();
    await retrying;
    // At once, not a window later; and the consumer was in contact throughout.
    expect(w.t.connected()).toBe(true);
    expect(w.outage.cut).toBeGreaterThan(failures);
    expect((await readTopic(w.replies, 1, 10_000)).map((m) => decodeResult(m.value).id)).toEqual(['held']);
    expect(await committed(w.groupId, w.requestTopic)).toBe(1);
  }, 60_000);

  it('idle through an outage stays ready; a send held unanswered (leader partitioned away) for longer than the window is unready', async () => {
    const w = await workerHolding('produce-silent');
    w.outage.start('blackhole');
    // Nothing to send: the outage cannot be seen and is no reason to leave the pool.
    await sleep(w.contactWindowMs + 1_000);
    expect(w.t.connected()).toBe(true);
    expect(w.outage.cut).toBe(0);

    const since = Date.now();
    let settled = false;
    const settling = w.t.settle([w.outcome]).then(() => void (settled = true));
    const { unreadyAfterMs } = await untilUnready(w.t, since, w.contactWindowMs + 10_000);
    // kafkajs waits requestTimeout (30 s) for the answer: no failure was reported yet.
    expect(settled).toBe(false);
    expect(w.outage.cut).toBe(1);
    expect(unreadyAfterMs).toBeDefined();
    expect(unreadyAfterMs!).toBeGreaterThanOrEqual(w.contactWindowMs);

    w.outage.stop();
    await settling;
    expect(w.t.connected()).toBe(true);
    expect(await committed(w.groupId, w.requestTopic)).toBe(1);
  }, 60_000);
});
