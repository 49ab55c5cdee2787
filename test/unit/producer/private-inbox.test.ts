import { describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import type { FleetError } from '../../../src/errors/fleet-error.ts';
import { createProducer } from '../../../src/producer/index.ts';
import { privateInbox } from '../../../src/producer/private-inbox.ts';
import { isPrivateInbox } from '../../../src/transport/names.ts';
import { sharedMemoryBroker } from '../../../src/transport/memory/memory-broker.ts';

// Brokers nobody listens on: a refusal must come before any connection is tried.
const transports = {
  kafka: parseFleetConfig({ transport: { kind: 'kafka', kafka: { brokers: ['127.0.0.1:1'] } } }).transport,
  bullmq: parseFleetConfig({ transport: { kind: 'bullmq', bullmq: { redisUrl: 'redis://127.0.0.1:1', connectTimeoutMs: 300 } } }).transport,
  memory: parseFleetConfig({ transport: { kind: 'memory' } }).transport,
};
const request = (id: string): RequestEnvelope => ({ id, model: 'inbox-test', createdAt: 1, inputs: [{ name: 'x', dtype: 'float32', shape: [1, 1], data: new Uint8Array(4) }] });

describe('a producer clientId (it names the private inbox of request())', () => {
  it.each([
    ['kafka', 'team/scorer'],
    ['kafka', 'x'.repeat(220)],
    ['bullmq', 'scorer:prod'],
    ['memory', 'my scorer'],
  ] as const)('%s: request() and requestMany() with clientId %j are refused naming clientId (they named a replyTo the caller never set)', async (kind, clientId) => {
    const producer = createProducer(transports[kind], { clientId });
    try {
      const err = (await producer.request(request('a'), { timeoutMs: 5_000 }).catch((e: unknown) => e)) as FleetError;
      expect(err.code).toBe('INVALID_ARGUMENT');
      expect(err.message).toMatch(/^clientId ".*" cannot name this producer's private inbox ".*\.inbox\.<uuid>" for request\(\): .*; pick a clientId of \[A-Za-z0-9._-\]/);
      expect(err.details).toMatchObject({ field: 'clientId' });
      const many = (await Promise.all(producer.requestMany([request('b'), request('c')], { timeoutMs: 5_000 }).map((p) => p.catch((e: unknown) => e)))) as FleetError[];
      expect(many.map((e) => e.details?.['field'])).toEqual(['clientId', 'clientId']);
      // Awaiting only one of them must not leave the others as unhandled rejections (they end the process).
      const unhandled: unknown[] = [];
      const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
      process.on('unhandledRejection', onUnhandled);
      try {
        await producer.requestMany([request('d'), request('e')], { timeoutMs: 5_000 })[0]?.catch(() => undefined);
        await new Promise((r) => setTimeout(r, 20));
      } finally {
        process.off('unhandledRejection', onUnhandled);
      }
      expect(unhandled).toEqual([]);
    } finally {
      await producer.close();
    }
  });

  it('publish() needs no inbox and still works with such a clientId; a usable one gets request() through', async () => {
    const sent: number[] = [];
    const consumer = sharedMemoryBroker().consume('inbox-test.requests', (msgs) => void sent.push(msgs.length), { autoAck: true });
    const odd = createProducer(transports.memory, { clientId: 'my scorer' });
    await odd.publish(request('p'));
    await odd.close();
    const fine = createProducer(transports.memory, { clientId: 'scorer-1.prod' });
    await expect(fine.request(request('q'), { timeoutMs: 20 })).rejects.toMatchObject({ code: 'TIMEOUT' });
    await fine.close();
    consumer.close();
    expect(sent.reduce((a, b) => a + b, 0)).toBe(2);
  });

  it("every private inbox name has the shape Kafka workers look for instead of creating (isPrivateInbox), whatever the clientId", () => {
    for (const clientId of ['producer', 'scorer-1.prod', 'a.inbox.b', 'x'.repeat(200)]) {
      const { name } = privateInbox('kafka', clientId);
      expect(name.startsWith(`${clientId}.inbox.`)).toBe(true);
      expect(isPrivateInbox(name), name).toBe(true);
    }
  });
});
