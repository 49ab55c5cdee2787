// At-least-once: the broker writes a result but its answer is lost (a connection reset right after
// the append, a broker dying), every time kafkajs tries, until the send fails (real broker).
import { describe, expect, it } from 'vitest';
import { decodeResult } from '../../../src/codec/index.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import type { Delivery } from '../../../src/transport/transport.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { idOf, Inbox, makeRequest, outcomeFor, startWith } from './conformance-kit.ts';
import { kafkaSettings, readTopic } from './kafka-harness.ts';
import { produceSniffingFactory } from './produce-sniffer.ts';

const track = closeAfterEach();

/**
 * Real TCP connections to the real broker. The next `n` Produce requests after lose(n) reach the
 * broker, which writes them, but their answers are never read: the connection is closed 200 ms
 * later.
 */
function answerLosing(): { factory: ReturnType<typeof produceSniffingFactory>; lose(n: number): void; lost(): number } {
  let left = 0;
  let lost = 0;
  const factory = produceSniffingFactory('answerLosing', (socket, produce, forward) => {
    if (!produce || left === 0) return forward();
    left--;
    lost++;
    const written = forward();
    socket.pause();
    setTimeout(() => socket.destroy(new Error('test: the answer to a produce request was lost')), 200);
    return written;
  });
  return { factory, lose: (n) => void (left = n), lost: () => lost };
}

describe('kafka at-least-once: results whose produce answers are lost', () => {
  it('a send that failed so is written once, and the next send (same partition, same size) is written, not dropped as its duplicate', async () => {
    const settings = kafkaSettings();
    const model = uniqueName('lostanswer').replace(/-/g, '');
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    await producer.publish([makeRequest(model, 'r1', 0), makeRequest(model, 'r2', 0)]);
    const lossy = answerLosing();
    // 2 retries: 3 attempts, each of them written by the broker and its answer lost.
    const t = track(new KafkaTransport(settings, { partitions: 1, retries: 2, socketFactory: lossy.factory }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const got = await inbox.waitFor(2, 30_000);
    const byId = new Map(got.map((d) => [idOf(d), d]));
    const d = (id: string): Delivery => byId.get(id) as Delivery;

    lossy.lose(3);
    const first = await t.settle([outcomeFor(d('r1'))]).then(
      () => 'ok',
      (err: unknown) => (err as Error).message,
    );
    console.log(`lost answers: settle of r1 after ${lossy.lost()} lost answers: ${first.slice(0, 160)}`);
    expect(lossy.lost()).toBe(3);
    expect(first).not.toBe('ok');
    // One result of one message to the same partition, as r1's batch was: a producer that kept
    // r1's rolled-back sequence number would have it dropped by the broker as r1's duplicate.
    await t.settle([outcomeFor(d('r2'))]);

    const replies = (await readTopic(`${model}.replies`, 10, 3_000)).map((m) => decodeResult(m.value).id);
    const count = (id: string): number => replies.filter((x) => x === id).length;
    console.log(`lost answers: on ${model}.replies r1 x${count('r1')}, r2 x${count('r2')}`);
    expect(count('r2')).toBe(1);
    // Before: each of kafkajs's attempts wrote r1 again (x3).
    expect(count('r1')).toBe(1);
  }, 60_000);
});
