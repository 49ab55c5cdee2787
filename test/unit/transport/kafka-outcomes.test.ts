import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { decodeResult, encodeRequest } from '../../../src/codec/index.ts';
import { ZERO_TIMINGS } from '../../../src/contracts/result-envelope.ts';
import { apartByInbox, messagesFor, type KafkaSource } from '../../../src/transport/kafka/kafka-outcomes.ts';
import { HEADERS, privateInboxName, replyTopicPattern } from '../../../src/transport/names.ts';
import type { Outcome } from '../../../src/transport/transport.ts';

const names = { replies: (m: string) => `${m}.replies`, dlq: (m: string) => `${m}.dlq` };
const value = encodeRequest({ id: 'r1', model: 'm', createdAt: 1, inputs: [{ name: 'x', dtype: 'uint8', shape: [1, 2], data: new Uint8Array([1, 2]) }] });
const source: KafkaSource = { topic: 'm.requests.p0', partition: 3, offset: 17, key: Buffer.from('k1'), headers: { h: 'v' }, value };

function outcome(replyTo: string | undefined, dlq?: Outcome['dlq']): Outcome {
  return {
    delivery: { deliveryId: 'm.requests.p0/3/17', model: 'm', priority: 0, body: value, receivedAt: 0, redelivered: false },
    result: { id: 'r1', model: 'm', version: '1', status: 'ok', timings: ZERO_TIMINGS, batchSize: 1, gear: 1, device: 0, worker: 'w' },
    ...(replyTo === undefined ? {} : { replyTo }),
    ...(dlq === undefined ? {} : { dlq }),
  };
}

describe('messagesFor', () => {
  it('sends the result to replyTo keyed like the request, else to the model replies topic', () => {
    const [reply, ...rest] = messagesFor(outcome('client.inbox'), source, names);
    expect(rest).toEqual([]);
    expect(reply?.topic).toBe('client.inbox');
    expect(reply?.message.key).toEqual(Buffer.from('k1'));
    expect(decodeResult(reply?.message.value as Buffer).id).toBe('r1');
    expect(messagesFor(outcome(undefined), source, names).map((m) => m.topic)).toEqual(['m.replies']);
  });

  it.each(['a:b', '.', '..', 'x'.repeat(250)])('replyTo %j Kafka cannot hold: a DLQ record with the original message and no result', (replyTo) => {
    const out = messagesFor(outcome(replyTo), source, names);
    expect(out).toHaveLength(1);
    const [dlq] = out;
    expect(dlq?.topic).toBe('m.dlq');
    expect(dlq?.message.value).toBe(value);
    expect(dlq?.message.headers?.[HEADERS.dlqReason]).toBe('INVALID_ARGUMENT');
    expect(String(dlq?.message.headers?.[HEADERS.dlqMessage])).toMatch(/^replyTo ".*" is not a legal Kafka topic name/);
    expect(dlq?.message.headers?.[HEADERS.dlqSource]).toBe('m.requests.p0/3/17');
    expect(dlq?.message.headers?.['h']).toBe('v');
  });

  it('an outcome that carries its own DLQ reason keeps it, and still gets its result', () => {
    const out = messagesFor(outcome(undefined, { reason: 'INVALID_MESSAGE', message: 'bad dtype' }), source, names);
    expect(out.map((m) => m.topic)).toEqual(['m.replies', 'm.dlq']);
    expect(out[1]?.message.headers?.[HEADERS.dlqReason]).toBe('INVALID_MESSAGE');
  });

  it('with transport.kafka.replyTopicPattern, a replyTo outside it gets no topic: a DLQ record naming the setting', () => {
    const guarded = { ...names, replyPattern: replyTopicPattern('(tenant-a|tenant-b)\\.[a-z-]+|.*\\.inbox\\.[0-9a-f-]+') };
    expect(messagesFor(outcome('tenant-a.scores'), source, guarded).map((m) => m.topic)).toEqual(['tenant-a.scores']);
    expect(messagesFor(outcome('cli.inbox.0f3c-9a'), source, guarded).map((m) => m.topic)).toEqual(['cli.inbox.0f3c-9a']);
    // Whole names only: a prefix that matches is not enough.
    for (const replyTo of ['tenant-a.scores.x1', 'reply-7f3a91', 'tenant-c.scores']) {
      const out = messagesFor(outcome(replyTo), source, guarded);
      expect(out.map((m) => m.topic), replyTo).toEqual(['m.dlq']);
      expect(out[0]?.message.headers?.[HEADERS.dlqReason]).toBe('INVALID_ARGUMENT');
      expect(String(out[0]?.message.headers?.[HEADERS.dlqMessage])).toContain(`replyTo "${replyTo}" does not match transport.kafka.replyTopicPattern`);
    }
    // The model's own replies topic is the fleet's, not a name a request chose.
    expect(messagesFor(outcome(undefined), source, guarded).map((m) => m.topic)).toEqual(['m.replies']);
  });

  it("a replyTo shaped like a request() client's inbox carries the same result for the model replies topic, should the inbox be gone", () => {
    const inbox = privateInboxName('client-7', randomUUID());
    const [reply, ...rest] = messagesFor(outcome(inbox), source, names);
    expect(rest).toEqual([]);
    expect(reply?.topic).toBe(inbox);
    expect(reply?.message.headers).toBeUndefined();
    const orElse = reply?.orElse;
    expect(orElse?.topic).toBe('m.replies');
    expect(orElse?.message.key).toEqual(Buffer.from('k1'));
    expect(orElse?.message.value).toBe(reply?.message.value);
    expect(orElse?.message.headers?.[HEADERS.requestId]).toBe('r1');
    expect(String(orElse?.message.headers?.[HEADERS.replyToGone])).toBe(`${inbox}: the request() client's inbox was deleted (the client closed) before this result`);
    // Other names are created on first use: no fallback, and none for a DLQ record.
    for (const other of ['client.inbox', 'm.inbox.3', `${inbox}x`]) expect(messagesFor(outcome(other), source, names)[0]?.orElse, other).toBeUndefined();
    const withDlq = messagesFor(outcome(inbox, { reason: 'FAILED', message: 'boom' }), source, names);
    expect(withDlq.map((m) => [m.topic, m.orElse?.topic])).toEqual([
      [inbox, 'm.replies'],
      ['m.dlq', undefined],
    ]);
  });
});

describe('apartByInbox (the produce requests of a send)', () => {
  const inboxA = privateInboxName('a', randomUUID());
  const inboxB = privateInboxName('b', randomUUID());
  const m = (topic: string, id: string): { topic: string; id: string } => ({ topic, id });
  const shape = (parts: ReadonlyArray<ReadonlyArray<{ id: string }>>): string[][] => parts.map((p) => p.map((x) => x.id));

  it('keeps one request, the same array, when no message or every message is for one inbox', () => {
    const none = [m('m.replies', '1'), m('m.dlq', '2'), m('tenant.replies', '3')];
    expect(apartByInbox(none)).toEqual([none]);
    expect(apartByInbox(none)[0]).toBe(none);
    const oneInbox = [m(inboxA, '1'), m(inboxA, '2')];
    expect(apartByInbox(oneInbox)[0]).toBe(oneInbox);
    expect(apartByInbox([])).toEqual([[]]);
  });

  it("puts each inbox's messages in a request of their own, the rest together, in order of first message", () => {
    const messages = [m(inboxA, 'a1'), m('m.dlq', 'd1'), m(inboxB, 'b1'), m('m.replies', 'r1'), m(inboxA, 'a2'), m('m.dlq', 'd2'), m(inboxB, 'b2')];
    expect(shape(apartByInbox(messages))).toEqual([
      ['a1', 'a2'],
      ['d1', 'r1', 'd2'],
      ['b1', 'b2'],
    ]);
    // A name that only looks like an inbox (no uuid) shares the request of the others.
    expect(shape(apartByInbox([m('m.replies', 'r1'), m('client.inbox', 'x1'), m(inboxA, 'a1')]))).toEqual([['r1', 'x1'], ['a1']]);
  });
});
