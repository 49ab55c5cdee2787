/**
 * transport.kafka.replyTopicPattern on the producer side: a request naming a replyTo outside it
 * is refused before anything is sent (the workers would only dead-letter it), and so is a
 * clientId whose private inbox it does not admit; the setting itself must be a valid regex.
 */
import { describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import type { FleetError } from '../../../src/errors/fleet-error.ts';
import { createProducer } from '../../../src/producer/index.ts';
import { fleetErrorOf } from '../../helpers/fleet-error-of.ts';

// A broker nobody listens on: every refusal must come before a connection is tried.
const kafka = (replyTopicPattern?: string) =>
  parseFleetConfig({ transport: { kind: 'kafka', kafka: { brokers: ['127.0.0.1:1'], ...(replyTopicPattern === undefined ? {} : { replyTopicPattern }) } } }).transport;
const request = (id: string, replyTo?: string): RequestEnvelope => ({
  id,
  model: 'm',
  createdAt: 1,
  inputs: [{ name: 'x', dtype: 'float32', shape: [1, 1], data: new Uint8Array(4) }],
  ...(replyTo === undefined ? {} : { replyTo }),
});

describe('transport.kafka.replyTopicPattern', () => {
  it('is refused at config load when it is not a regular expression, naming the field', () => {
    const err = fleetErrorOf(() => kafka('tenant-(a'));
    expect(err.code).toBe('INVALID_CONFIG');
    expect(err.message).toMatch(/transport\.kafka\.replyTopicPattern.*not a valid regular expression/);
  });

  it('makes publish refuse a replyTo outside it before sending, naming replyTo and the setting', async () => {
    const producer = createProducer(kafka('tenant-a\\.[a-z]+'), { clientId: 'tenant-a' });
    try {
      const err = (await producer.publish([request('ok', 'tenant-a.scores'), request('bad', 'tenant-a.scores.2')]).catch((e: unknown) => e)) as FleetError;
      expect(err.code).toBe('INVALID_ARGUMENT');
      expect(err.details).toMatchObject({ field: 'replyTo', index: 1 });
      expect(err.message).toMatch(/replyTo "tenant-a\.scores\.2" does not match transport\.kafka\.replyTopicPattern tenant-a\\\.\[a-z\]\+.*nothing was published/);
    } finally {
      await producer.close();
    }
  });

  it('refuses request() for a clientId whose private inbox the pattern does not admit, and says how to fix it', async () => {
    const producer = createProducer(kafka('tenant-a\\.[a-z]+'), { clientId: 'tenant-a' });
    try {
      const err = (await producer.request(request('r'), { timeoutMs: 5_000 }).catch((e: unknown) => e)) as FleetError;
      expect(err.code).toBe('INVALID_ARGUMENT');
      expect(err.details).toMatchObject({ field: 'clientId' });
      expect(err.message).toMatch(/does not match transport\.kafka\.replyTopicPattern.*widen the pattern to admit <clientId>\.inbox\.<uuid>/);
    } finally {
      await producer.close();
    }
  });
});
