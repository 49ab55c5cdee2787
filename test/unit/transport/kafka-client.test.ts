import { logLevel } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { kafkaLogCreator, startFailure, type TransportLogger } from '../../../src/transport/kafka/kafka-client.ts';

function recording(): { logger: TransportLogger; lines: Array<[string, string]> } {
  const lines: Array<[string, string]> = [];
  const at = (level: string) => (_obj: object, msg: string) => void lines.push([level, msg]);
  return { logger: { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') }, lines };
}

const entry = (level: logLevel, message: string, error?: string, extra: Record<string, unknown> = {}) => ({
  namespace: 'Connection',
  level,
  label: 'ERROR',
  log: { timestamp: '2026-11-29T00:00:00.000Z', logger: 'kafkajs', message, ...(error === undefined ? {} : { error }), ...extra },
});

describe('kafkaLogCreator', () => {
  it.each([
    ['a heartbeat refused during a rebalance goes to debug', entry(logLevel.ERROR, 'Response Heartbeat(key: 12, version: 3)', 'The group is rebalancing, so a rejoin is needed'), 'debug'],
    ['the rejoin kafkajs reports once stays a warning', entry(logLevel.WARN, 'The group is rebalancing, re-joining', 'The group is rebalancing, so a rejoin is needed'), 'warn'],
    ['any other failed response stays an error', entry(logLevel.ERROR, 'Response Produce(key: 0, version: 7)', 'The request included a message larger than the max message size the server will accept'), 'error'],
    ['leadership moving (kafkajs refreshes metadata and retries) is a warning', entry(logLevel.ERROR, 'Response ListOffsets(key: 2, version: 3)', 'This server is not the leader for that topic-partition'), 'warn'],
    ['a leader election in progress is a warning', entry(logLevel.ERROR, 'Response Produce(key: 0, version: 7)', 'There is no leader for this topic-partition as we are in the middle of a leadership election'), 'warn'],
    ['the same words outside a broker answer stay an error', entry(logLevel.ERROR, 'Crash: gave up', 'This server is not the leader for that topic-partition'), 'error'],
    ['an error without a broker answer stays an error', entry(logLevel.ERROR, 'Crash: KafkaJSNumberOfRetriesExceeded'), 'error'],
    ['a transaction told to retry goes to debug', entry(logLevel.ERROR, 'Response AddPartitionsToTxn(key: 24, version: 1)', 'The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing'), 'debug'],
    ['a send that kafkajs will retry is a warning', entry(logLevel.ERROR, '[Producer] Failed to send messages: leader not available', undefined, { retryCount: 0, retryTime: 51 }), 'warn'],
    ['info stays info', entry(logLevel.INFO, 'Consumer has joined the group'), 'info'],
  ])('%s', (_name, e, want) => {
    const { logger, lines } = recording();
    kafkaLogCreator(logger)(logLevel.INFO)(e);
    expect(lines).toEqual([[want, e.log.message]]);
  });

  it('logs nothing without a logger', () => {
    expect(() => kafkaLogCreator(undefined)(logLevel.INFO)(entry(logLevel.ERROR, 'Response Heartbeat'))).not.toThrow();
  });
});

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
    expect(startFailure('starting', err, ['a:9092', 'b:9092'])).toBe(want);
  });
});
