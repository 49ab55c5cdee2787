// A kafkajs consumer whose search for its group coordinator fails on every broker it asks (the
// connection drops under the FindCoordinator request, as when the broker is shutting down) gets
// KafkaJSGroupCoordinatorNotFound, which kafkajs 2.2.4 classes as non-retriable: the consumer
// crashes and is not restarted. A reply subscription then read nothing more, without a word; the
// exactly-once outage drill's own reader died that way at a broker SIGTERM. Made here on the wire:
// the group forgets the member (LeaveGroup in its name), and the connection carrying the
// FindCoordinator of its rejoin is cut (RequestBreaker).
import { describe, expect, it } from 'vitest';
import { encodeResult } from '../../../src/codec/index.ts';
import { ZERO_TIMINGS, type ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import { removePredecessorMembers } from '../../../src/transport/kafka/predecessor-members.ts';
import type { FleetError } from '../../../src/errors/fleet-error.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { Inbox, makeRequest, PRIORITY_LEVELS, ResultSink, sleep } from './conformance-kit.ts';
import { adminKafka, kafkaSettings } from './kafka-harness.ts';
import { onlyMember, RequestBreaker } from './group-request-breaker.ts';

const track = closeAfterEach();

/** The group forgets its member; the FindCoordinator of the rejoin that follows is cut. */
async function loseMemberAndItsCoordinator(breaker: RequestBreaker, groupId: string): Promise<void> {
  const kafka = adminKafka();
  const memberId = await onlyMember(kafka, groupId);
  breaker.arm();
  expect(await removePredecessorMembers(kafka, [{ groupId, memberId }], undefined), 'member removed by LeaveGroup').toBe(1);
  for (const until = Date.now() + 20_000; breaker.cut === 0; await sleep(20)) {
    if (Date.now() > until) throw new Error('no FindCoordinator within 20 s of the LeaveGroup');
  }
}

describe('kafka: a consumer that kafkajs could not find a group coordinator for', () => {
  it("a producer's reply subscription runs again and hands over the results written after", async () => {
    const settings = kafkaSettings();
    const breaker = new RequestBreaker('findCoordinator');
    const producer = track(new KafkaProducer(settings, { partitions: 1, socketFactory: breaker.socketFactory }));
    const replyTo = uniqueName('coordinator-replies');
    const sink = new ResultSink();
    const groupId = uniqueName('coordinator-subscriber');
    track(await producer.subscribeReplies(replyTo, sink.onResult, { groupId }));
    const writer = adminKafka().producer();
    await writer.connect();
    track({ close: () => writer.disconnect() });
    const result = (id: string): ResultEnvelope => ({ id, model: 'm', version: '1', status: 'ok', timings: ZERO_TIMINGS, batchSize: 1, gear: 1, device: 0, worker: 'test', outputs: [] });
    await writer.send({ topic: replyTo, messages: [{ key: 'before', value: encodeResult(result('before')) }] });
    await sink.waitFor(1, 30_000);

    await loseMemberAndItsCoordinator(breaker, groupId);
    const cutAt = Date.now();
    await writer.send({ topic: replyTo, messages: [{ key: 'after', value: encodeResult(result('after')) }] });
    // Without a new run: never.
    await sink.waitFor(2, 30_000);
    console.log(`[coordinator not found, reply subscription] the result written after handed over ${Date.now() - cutAt} ms after the cut`);
    expect(sink.results.map((r) => r.id)).toContain('after');
  }, 90_000);

  it('the request consumer of a worker runs again, not a fatal failure, and delivers the requests published after', async () => {
    const settings = kafkaSettings({ sessionTimeoutMs: 6_000 });
    const model = uniqueName('coordnotfound').replace(/-/g, '');
    const breaker = new RequestBreaker('findCoordinator');
    const t = track(new KafkaTransport(settings, { partitions: 1, socketFactory: breaker.socketFactory }));
    const inbox = new Inbox();
    const fatal: FleetError[] = [];
    await t.start({ subscriptions: [{ model, priorityLevels: PRIORITY_LEVELS }], onDeliveries: inbox.onDeliveries, onFatal: (err) => fatal.push(err) });
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    await producer.publish([makeRequest(model, 'before', 0)]);
    await inbox.waitFor(1, 30_000);

    await loseMemberAndItsCoordinator(breaker, settings.groupId);
    const cutAt = Date.now();
    await producer.publish([makeRequest(model, 'after', 0)]);
    // Without a new run: the worker fails (drains and exits 70 for its supervisor to start again).
    for (const until = Date.now() + 30_000; inbox.all.length < 2 && fatal.length === 0; await sleep(50)) {
      if (Date.now() > until) throw new Error('the request published after was not delivered within 30 s');
    }
    expect(fatal.map((e) => e.message)).toEqual([]);
    console.log(`[coordinator not found, worker] the request published after delivered ${Date.now() - cutAt} ms after the cut`);
  }, 90_000);
});
