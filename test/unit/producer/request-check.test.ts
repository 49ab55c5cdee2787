import { describe, expect, it } from 'vitest';
import { DEFAULT_LIMITS } from '../../../src/contracts/limits.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { checkRequests } from '../../../src/producer/request-check.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { createProducer } from '../../../src/producer/index.ts';
import { fleetErrorOf } from '../../helpers/fleet-error-of.ts';

const good = (extra: Partial<RequestEnvelope> = {}): RequestEnvelope => ({
  id: 'r1',
  model: 'm',
  createdAt: 1_700_000_000_000,
  inputs: [{ name: 'x', dtype: 'float32', shape: [1, 2], data: new Uint8Array(8) }],
  ...extra,
});

describe('checkRequests', () => {
  it('passes well-formed requests on every transport', () => {
    for (const kind of ['kafka', 'bullmq', 'memory'] as const) expect(() => checkRequests([good(), good({ id: 'r2', replyTo: 'my.replies' })], kind, DEFAULT_LIMITS)).not.toThrow();
  });

  it.each([
    ['a missing createdAt', { createdAt: undefined }, 'createdAt', /createdAt: .*it is required: add it as a number/],
    ['an empty id', { id: '' }, 'id', /id: id must not be empty \(make it at least 1 character long\)/],
    ['a priority past the last level', { priority: 16 }, 'priority', /priority: priority must be < 16 \(use a value <= 15\)/],
    ['no inputs', { inputs: [] }, 'inputs', /inputs needs at least one tensor \(give at least 1 item\)/],
    ['an unknown dtype', { inputs: [{ name: 'x', dtype: 'float64', shape: [1], data: new Uint8Array(8) }] }, 'inputs[0].dtype', /use one of "float32"/],
    [
      'data that does not fit its shape',
      { inputs: [{ name: 'x', dtype: 'float32', shape: [1, 3], data: new Uint8Array(8) }] },
      'inputs[0].data',
      /inputs\[0\]\.data is 8 bytes but float32 \[1,3\] needs 12; fix dtype, shape or data/,
    ],
  ])('refuses %s with INVALID_ARGUMENT naming the field', (_what, extra, field, message) => {
    const err = fleetErrorOf(() => checkRequests([good({ id: 'ok' }), good(extra as Partial<RequestEnvelope>)], 'memory', DEFAULT_LIMITS));
    expect(err.code).toBe('INVALID_ARGUMENT');
    expect(err.details.field).toBe(field);
    expect(err.details.index).toBe(1);
    expect(err.message).toMatch(message);
    expect(err.message).toMatch(/^invalid request \[1\]/);
    expect(err.message).toMatch(/nothing was published$/);
  });

  it('gives the problem of the one request refused as details.problem: no "request [i]" before it, no "nothing was published" after it', () => {
    const data = fleetErrorOf(() => checkRequests([good({ id: 'ok' }), good({ id: 'd', inputs: [{ name: 'x', dtype: 'float32', shape: [1, 3], data: new Uint8Array(8) }] })], 'memory', DEFAULT_LIMITS));
    expect(data.details).toMatchObject({ index: 1, field: 'inputs[0].data', problem: 'inputs[0].data is 8 bytes but float32 [1,3] needs 12; fix dtype, shape or data' });
    const schema = fleetErrorOf(() => checkRequests([good({ id: 'ok' }), good({ id: 's', createdAt: undefined } as Partial<RequestEnvelope>)], 'memory', DEFAULT_LIMITS));
    expect(schema.details['index']).toBe(1);
    expect(schema.details['problem']).toMatch(/^createdAt: .*it is required: add it as a number/);
    expect(schema.details['problem']).not.toMatch(/request|nothing was published/);
    const limit = fleetErrorOf(() => checkRequests([good({ meta: { amount: 10n } as never })], 'kafka', DEFAULT_LIMITS));
    expect(limit.details['problem']).toMatch(/^meta cannot be sent as JSON \(.*BigInt.*\); .*strings.*\(a BigInt as a string\)$/);
    const replyTo = fleetErrorOf(() => checkRequests([good({ replyTo: 'bad name!' })], 'kafka', DEFAULT_LIMITS));
    expect(replyTo.details).toMatchObject({ index: 0, field: 'replyTo' });
    expect(replyTo.details['problem']).toMatch(/^replyTo .*leave replyTo out for \{model\}\.replies$/);
  });

  it('refuses a meta that is not JSON (a BigInt) naming meta, with a code, where it threw a FleetError without one', () => {
    const err = fleetErrorOf(() => checkRequests([good({ meta: { amount: 10n } as never })], 'kafka', DEFAULT_LIMITS));
    expect(err.code).toBe('INVALID_ARGUMENT');
    expect(err.details).toMatchObject({ field: 'meta', index: 0 });
    expect(err.message).toMatch(/^invalid request \(id "r1"\): meta cannot be sent as JSON \(.*BigInt.*\); .*strings/);
  });

  it('refuses a null or undefined in the list as a request that is not one, where it threw a TypeError', () => {
    for (const bad of [null, undefined]) {
      const err = fleetErrorOf(() => checkRequests([good(), bad as never], 'memory', DEFAULT_LIMITS));
      expect(err.code).toBe('INVALID_ARGUMENT');
      expect(err.details.index).toBe(1);
      expect(err.message).toMatch(/^invalid request \[1\]/);
    }
  });

  it('refuses a replyTo the transport cannot address, by that transport rule', () => {
    expect(() => checkRequests([good({ replyTo: 'with space' })], 'bullmq', DEFAULT_LIMITS)).not.toThrow();
    const kafka = fleetErrorOf(() => checkRequests([good({ replyTo: 'with space' })], 'kafka', DEFAULT_LIMITS));
    expect(kafka.details.field).toBe('replyTo');
    expect(kafka.message).toMatch(/^invalid request \(id "r1"\): replyTo "with space" is not a legal Kafka topic name/);
    const bullmq = fleetErrorOf(() => checkRequests([good({ replyTo: 'a:b' })], 'bullmq', DEFAULT_LIMITS));
    expect(bullmq.message).toMatch(/replyTo "a:b" is not a legal BullMQ queue name .*leave replyTo out for \{model\}\.replies/);
  });

  it('refuses what the workers would refuse as over their limits, naming the limit', () => {
    const limits = { ...DEFAULT_LIMITS, maxMessageBytes: 1_000, maxElementsPerTensor: 100 };
    const big = fleetErrorOf(() =>
      checkRequests([good({ inputs: [{ name: 'x', dtype: 'uint8', shape: [1, 90], data: new Uint8Array(90) }, { name: 'y', dtype: 'float32', shape: [1, 90], data: new Uint8Array(360) }, { name: 'z', dtype: 'float32', shape: [1, 90], data: new Uint8Array(360) }, { name: 'w', dtype: 'float32', shape: [1, 90], data: new Uint8Array(360) }] })], 'kafka', limits),
    );
    expect(big.code).toBe('LIMIT_EXCEEDED');
    expect(big.message).toMatch(/^invalid request \(id "r1"\): its tensors alone are 1170 bytes, over the message limit of 1000 \(limits\.maxMessageBytes\)/);
    const wide = fleetErrorOf(() => checkRequests([good({ inputs: [{ name: 'x', dtype: 'uint8', shape: [1, 101], data: new Uint8Array(101) }] })], 'kafka', limits));
    expect(wide.code).toBe('LIMIT_EXCEEDED');
    expect(wide.details.field).toBe('inputs[0].shape');
    expect(wide.message).toMatch(/limits\.maxElementsPerTensor/);
  });
});

describe('subscribeReplies', () => {
  // Brokers nobody listens on: a refusal must come before any connection is made.
  const transports = {
    kafka: parseFleetConfig({ transport: { kind: 'kafka', kafka: { brokers: ['127.0.0.1:1'] } } }).transport,
    bullmq: parseFleetConfig({ transport: { kind: 'bullmq', bullmq: { redisUrl: 'redis://127.0.0.1:1', connectTimeoutMs: 300 } } }).transport,
    memory: parseFleetConfig({ transport: { kind: 'memory' } }).transport,
  };
  it.each([
    ['bullmq', 'scores:v2'],
    ['bullmq', ''],
    ['kafka', 'scores/v2'],
    ['memory', 'my scores'],
  ] as const)('%s refuses the reply name %j naming replyTo, before connecting (BullMQ threw a bare Error and left a Redis connection open)', async (kind, name) => {
    const producer = createProducer(transports[kind]);
    try {
      const err = (await producer.subscribeReplies(name, () => undefined).catch((e: unknown) => e)) as FleetError;
      expect(err).toBeInstanceOf(FleetError);
      expect(err.code).toBe('INVALID_ARGUMENT');
      expect(err.details).toMatchObject({ field: 'replyTo' });
      expect(err.message).toMatch(/^cannot subscribe to replies on .*: .* is not a legal .*; pick a name the transport allows/);
    } finally {
      await producer.close();
    }
  });
});

