// A request for a model no fleet serves: with ProducerOptions.models the producer refuses it
// before anything is sent (UNKNOWN_MODEL; before, Kafka created `{model}.requests.p{priority}` and
// request() waited out its timeout); without, a request() that times out names the model and how to
// check whether any worker reads it.
import { describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { createProducer } from '../../../src/producer/index.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';

// Brokers nobody listens on: a refusal must come before any connection is tried.
const transports = {
  kafka: parseFleetConfig({ transport: { kind: 'kafka', kafka: { brokers: ['127.0.0.1:1'] } } }).transport,
  bullmq: parseFleetConfig({ transport: { kind: 'bullmq', bullmq: { redisUrl: 'redis://127.0.0.1:1', connectTimeoutMs: 300 } } }).transport,
  memory: parseFleetConfig({ transport: { kind: 'memory' } }).transport,
};
const request = (id: string, model: string): RequestEnvelope => ({ id, model, createdAt: 1, inputs: [{ name: 'x', dtype: 'float32', shape: [1, 1], data: new Uint8Array(4) }] });
const failure = (p: Promise<unknown>): Promise<FleetError> => p.then(
  () => {
    throw new Error('expected a rejection');
  },
  (e: unknown) => e as FleetError,
);

describe('a producer told the served models', () => {
  it.each(['kafka', 'bullmq', 'memory'] as const)('%s: publish(), request() and requestMany() refuse another model at once, naming the field and the served ones', async (kind) => {
    const producer = createProducer(transports[kind], { models: ['mlp-classifier', 'resnet'] });
    try {
      const startedAt = Date.now();
      const published = await failure(producer.publish([request('a', 'mlp-classifier'), request('b', 'mlp-clasifier')]));
      expect(published.code).toBe('UNKNOWN_MODEL');
      expect(published.message).toMatch(/^model: "mlp-clasifier" is not served by this fleet \(not in the producer's models: mlp-classifier, resnet\)/);
      expect(published.details).toMatchObject({ field: 'model', index: 1, model: 'mlp-clasifier', served: ['mlp-classifier', 'resnet'] });
      const requested = await failure(producer.request(request('c', 'typo'), { timeoutMs: 30_000 }));
      expect(requested.code).toBe('UNKNOWN_MODEL');
      const many = await Promise.allSettled(producer.requestMany([request('d', 'typo')], { timeoutMs: 30_000 }));
      expect(many[0]?.status === 'rejected' && FleetError.is(many[0].reason, 'UNKNOWN_MODEL')).toBe(true);
      // Nothing was tried against the (unreachable) broker: a connection attempt takes far longer.
      expect(Date.now() - startedAt).toBeLessThan(250);
    } finally {
      await producer.close();
    }
  });

  it('memory: nothing of a refused publish is sent; a listed model is', async () => {
    const broker = new MemoryBroker();
    const producer = createProducer(transports.memory, { models: ['known'], memoryBroker: broker });
    try {
      await failure(producer.publish([request('a', 'known'), request('b', 'unknown')]));
      expect(broker.depth('known.requests')).toBe(0);
      expect(broker.depth('unknown.requests')).toBe(0);
      await producer.publish(request('c', 'known'));
      expect(broker.depth('known.requests')).toBe(1);
    } finally {
      await producer.close();
    }
  });
});

describe('a request() no worker answers', () => {
  it('memory: the TIMEOUT names the model and how to check for its workers', async () => {
    const producer = createProducer(transports.memory, { memoryBroker: new MemoryBroker() });
    try {
      const err = await failure(producer.request(request('r1', 'nobody-serves'), { timeoutMs: 30 }));
      expect(err.code).toBe('TIMEOUT');
      expect(err.message).toBe(
        'no reply for request "r1" within 30 ms: the fleet may be backed up (raise timeoutMs), or no worker may serve model "nobody-serves" ' +
          "(check that the fleet config's models lists it and that a worker in this process subscribes to nobody-serves.requests on the producer's memory broker)",
      );
      expect(err.details).toMatchObject({ id: 'r1', timeoutMs: 30, model: 'nobody-serves' });
    } finally {
      await producer.close();
    }
  });
});
