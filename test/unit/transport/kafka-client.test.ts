import { describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { KafkaSettingsSchema } from '../../../src/contracts/fleet-config.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { consumerFailure, retryTopicCreation, startFailure, tlsOptions, whileTopicMetadataLags } from '../../../src/transport/kafka/kafka-client.ts';
import { fleetErrorOf } from '../../helpers/fleet-error-of.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

describe('startFailure', () => {
  const named = (name: string, message = 'x', cause?: unknown) => Object.assign(new Error(message), { name, cause });
  const hint = 'starting: no broker of transport.kafka.brokers (a:9092, b:9092) answered; check the list and that the brokers are up and reachable from here';
  it.each([
    ['a connection error', named('KafkaJSConnectionError', 'Connection error: connect ECONNREFUSED 10.0.0.1:9092'), hint],
    ['retries exhausted on a connection error', named('KafkaJSNumberOfRetriesExceeded', 'gave up', named('KafkaJSConnectionError')), hint],
    ['an unresolvable host', new Error('getaddrinfo ENOTFOUND kafka.internal'), hint],
    ['a broker that answered with a refusal', named('KafkaJSProtocolError', 'Not authorized to access topics: [Topic authorization failed]'), 'starting'],
    ['a non-error', 'boom', 'starting'],
  ])('%s', (_name, err, want) => {
    expect(startFailure('starting', err, { brokers: ['a:9092', 'b:9092'] })).toBe(want);
  });
});

describe('startFailure names the setting to fix', () => {
  const sasl = { mechanism: 'scram-sha-512' as const, username: 'svc', password: 'hunter2' };
  it('a refused SASL login names transport.kafka.sasl and the user, never the password', () => {
    const err = Object.assign(new Error('SASL SCRAM SHA512 authentication failed: Authentication failed'), { name: 'KafkaJSSASLAuthenticationError' });
    const message = startFailure('starting', Object.assign(new Error('gave up'), { name: 'KafkaJSNumberOfRetriesExceeded', cause: err }), { brokers: ['b:9093'], sasl });
    expect(message).toBe('starting: the brokers refused the SASL login of transport.kafka.sasl (mechanism scram-sha-512, username svc); check the username, password and mechanism');
    expect(message).not.toContain('hunter2');
  });

  it.each([
    ['an unknown CA', Object.assign(new Error('self-signed certificate in certificate chain'), { code: 'SELF_SIGNED_CERT_IN_CHAIN' })],
    ['a plaintext listener', new Error('Client network socket disconnected before secure TLS connection was established')],
  ])('a TLS failure (%s) names transport.kafka.ssl', (_what, err) => {
    expect(startFailure('starting', Object.assign(new Error('Connection error'), { name: 'KafkaJSConnectionError', cause: err }), { brokers: ['b:9093'], ssl: true })).toMatch(
      /^starting: TLS to the brokers failed; check transport\.kafka\.ssl/,
    );
  });
});

describe('kafka TLS settings', () => {
  it('true uses the system CAs, false none; files are read at start-up', () => {
    expect(tlsOptions(true)).toBe(true);
    expect(tlsOptions(false)).toBeUndefined();
    const dir = tempDir('npu-fleet-tls-');
    writeFileSync(join(dir, 'ca.pem'), 'CA');
    writeFileSync(join(dir, 'cert.pem'), 'CERT');
    writeFileSync(join(dir, 'key.pem'), 'KEY');
    const ssl = KafkaSettingsSchema.parse({ brokers: ['b:9093'], ssl: { caFile: join(dir, 'ca.pem'), certFile: join(dir, 'cert.pem'), keyFile: join(dir, 'key.pem') } }).ssl;
    expect(tlsOptions(ssl)).toEqual({ rejectUnauthorized: true, ca: [Buffer.from('CA')], cert: Buffer.from('CERT'), key: Buffer.from('KEY') });
  });

  it('a file that cannot be read is INVALID_CONFIG naming the field', () => {
    const err = fleetErrorOf(() => tlsOptions({ caFile: '/nonexistent/ca.pem', rejectUnauthorized: true }));
    expect(err.code).toBe('INVALID_CONFIG');
    expect(err.message).toBe('transport.kafka.ssl.caFile: cannot read /nonexistent/ca.pem (ENOENT)');
  });

  it('certFile without keyFile is refused by the schema', () => {
    const parsed = KafkaSettingsSchema.safeParse({ brokers: ['b:9093'], ssl: { certFile: '/c.pem' } });
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues[0]?.message).toBe('certFile and keyFile go together (mutual TLS needs both)');
    expect(parsed.error?.issues[0]?.path).toEqual(['ssl', 'keyFile']);
  });
});

describe('consumerFailure (a consumer kafkajs will not restart)', () => {
  const settings = { groupId: 'fleet', sessionTimeoutMs: 3_000, sasl: { mechanism: 'plain' as const, username: 'svc', password: 'hunter2' } };
  const protocol = (type: string, message: string) => Object.assign(new Error(message), { name: 'KafkaJSProtocolError', type, retriable: false });
  it.each([
    ['a session timeout outside the brokers\' range', protocol('INVALID_SESSION_TIMEOUT', 'The session timeout is not within the range allowed by the broker'), 'INVALID_CONFIG', 'transport.kafka.sessionTimeoutMs', /transport\.kafka\.sessionTimeoutMs \(3000 ms\): it must lie within their group\.min\.session\.timeout\.ms/],
    ['a group the user may not use', protocol('GROUP_AUTHORIZATION_FAILED', 'Not authorized to access group'), 'TRANSPORT_ERROR', 'transport.kafka.groupId', /user svc\) use consumer group transport\.kafka\.groupId \(fleet\); grant it READ/],
    ['topics the user may not read', protocol('TOPIC_AUTHORIZATION_FAILED', 'Not authorized to access topics'), 'TRANSPORT_ERROR', 'transport.kafka.topicTemplate', /read the request topics \(transport\.kafka\.topicTemplate\); grant it READ and DESCRIBE/],
    ['anything else', Object.assign(new Error('boom'), { name: 'KafkaJSNonRetriableError' }), 'TRANSPORT_ERROR', 'transport.kafka', /^the kafka consumer stopped and kafkajs will not restart it: boom$/],
  ])('%s', (_what, err, code, field, message) => {
    const fe = consumerFailure(Object.assign(new Error('wrapped'), { name: 'KafkaJSNonRetriableError', cause: err }), settings);
    expect(fe.code).toBe(code);
    expect(fe.retriable).toBe(false);
    expect(fe.details['field']).toBe(field);
    expect(fe.message).toMatch(message);
    expect(fe.message).not.toContain('hunter2');
  });
});

describe('whileTopicMetadataLags', () => {
  const lag = (): Error => Object.assign(new Error('This server does not host this topic-partition'), { type: 'UNKNOWN_TOPIC_OR_PARTITION', retriable: true });
  const noSleep = (waits: number[]) => (ms: number) => {
    waits.push(ms);
    return Promise.resolve();
  };

  it('asks again, with backoff, while a freshly created topic is unknown to the broker that answered', async () => {
    const waits: number[] = [];
    let calls = 0;
    const out = await whileTopicMetadataLags(() => {
      calls++;
      return calls < 3 ? Promise.reject(lag()) : Promise.resolve('subscribed');
    }, noSleep(waits));
    expect(out).toBe('subscribed');
    expect(calls).toBe(3);
    expect(waits).toEqual([200, 400]);
  });

  it('gives up after 9 tries (21.2 s of waits) with the last error', async () => {
    const waits: number[] = [];
    let calls = 0;
    const err = await whileTopicMetadataLags(() => {
      calls++;
      return Promise.reject(lag());
    }, noSleep(waits)).catch((e: unknown) => e);
    expect((err as Error).message).toBe('This server does not host this topic-partition');
    expect(calls).toBe(9);
    expect(waits).toEqual([200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
  });

  it('does not retry any other failure', async () => {
    let calls = 0;
    const err = await whileTopicMetadataLags(() => {
      calls++;
      return Promise.reject(Object.assign(new Error('SASL refused'), { name: 'KafkaJSSASLAuthenticationError' }));
    }, noSleep([])).catch((e: unknown) => e);
    expect((err as Error).message).toBe('SASL refused');
    expect(calls).toBe(1);
  });
});

describe('retryTopicCreation', () => {
  const failing = (cause: object) => new FleetError('TRANSPORT_ERROR', 'creating Kafka topics t failed', { cause, retriable: true });
  const run = async (cause: object): Promise<{ calls: number; waits: number[]; err: unknown }> => {
    const waits: number[] = [];
    let calls = 0;
    const err = await retryTopicCreation(
      () => {
        calls++;
        return Promise.reject(failing(cause));
      },
      (ms) => {
        waits.push(ms);
        return Promise.resolve();
      },
    ).catch((e: unknown) => e);
    return { calls, waits, err };
  };

  it.each([
    ['a new topic unknown to the broker (metadata lag) gets 21.2 s', { type: 'UNKNOWN_TOPIC_OR_PARTITION', retriable: true }, [200, 400, 800, 1600, 3200, 5000, 5000, 5000]],
    ['any other retriable failure gets 6.2 s', { type: 'REQUEST_TIMED_OUT', retriable: true }, [200, 400, 800, 1600, 3200]],
    ['a failure kafkajs does not call retriable is not retried', { type: 'INVALID_CONFIG', retriable: false }, []],
  ])('%s', async (_name, cause, expected) => {
    const { calls, waits, err } = await run(cause);
    expect(waits).toEqual(expected);
    expect(calls).toBe(expected.length + 1);
    expect((err as FleetError).message).toBe('creating Kafka topics t failed');
  });

  it('returns what the creation returns once it succeeds', async () => {
    let calls = 0;
    const out = await retryTopicCreation(
      () => (++calls < 4 ? Promise.reject(failing({ type: 'UNKNOWN_TOPIC_OR_PARTITION', retriable: true })) : Promise.resolve('made')),
      () => Promise.resolve(),
    );
    expect([out, calls]).toEqual(['made', 4]);
  });
});
