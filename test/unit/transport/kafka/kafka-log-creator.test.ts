import { logLevel } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { SEND_GIVEN_UP, type TransportLogger } from '../../../../src/transport/kafka/kafka-client.ts';
import { kafkaLogCreator, TRANSIENT_GRACE_MS } from '../../../../src/transport/kafka/kafka-log-creator.ts';

function recording(): { logger: TransportLogger; lines: Array<[string, string]>; objs: object[] } {
  const lines: Array<[string, string]> = [];
  const objs: object[] = [];
  const at = (level: string) => (obj: object, msg: string) => {
    lines.push([level, msg]);
    objs.push(obj);
  };
  return { logger: { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') }, lines, objs };
}

const entry = (level: logLevel, message: string, error?: string, extra: Record<string, unknown> = {}) => ({
  namespace: 'Connection',
  level,
  label: 'ERROR',
  log: { timestamp: '2026-11-29T00:00:00.000Z', logger: 'kafkajs', message, ...(error === undefined ? {} : { error }), ...extra },
});

const NOT_LEADER = 'This server is not the leader for that topic-partition';
const notLeader = entry(logLevel.ERROR, 'Response ListOffsets(key: 2, version: 3)', NOT_LEADER);
const refused = entry(logLevel.ERROR, 'Connection error: connect ECONNREFUSED 127.0.0.1:1', undefined, { broker: '127.0.0.1:1' });
const seedRefused = entry(logLevel.ERROR, 'Failed to connect to seed broker, trying another broker from the list: Connection error: connect ECONNREFUSED 127.0.0.1:1', undefined, {
  retryCount: 0,
  retryTime: 115,
});
const rejoin = entry(logLevel.WARN, 'The group is rebalancing, re-joining', 'The group is rebalancing, so a rejoin is needed', { groupId: 'g' });

/** A log function of kafkaLogCreator on a clock the test moves. */
function clocked(logger: TransportLogger) {
  let nowMs = 1_000_000;
  const log = kafkaLogCreator(logger, () => nowMs)(logLevel.INFO);
  return { log, at: (ms: number) => (nowMs = 1_000_000 + ms) };
}

describe('kafkaLogCreator', () => {
  it.each([
    ['a heartbeat refused during a rebalance goes to debug', entry(logLevel.ERROR, 'Response Heartbeat(key: 12, version: 3)', 'The group is rebalancing, so a rejoin is needed'), 'debug'],
    ['a heartbeat after the session expired (kafkajs rejoins) goes to debug', entry(logLevel.ERROR, 'Response Heartbeat(key: 12, version: 3)', 'The coordinator is not aware of this member'), 'debug'],
    ['a CreateTopics answer with per-topic errors (an existing reply topic) goes to debug: ensureTopics reports real refusals', entry(logLevel.ERROR, 'Response CreateTopics(key: 19, version: 3)', 'Topic creation errors'), 'debug'],
    ['the rejoin kafkajs reports once per rebalance is info', rejoin, 'info'],
    ['any other failed response stays an error', entry(logLevel.ERROR, 'Response Produce(key: 0, version: 7)', 'The request included a message larger than the max message size the server will accept'), 'error'],
    ['leadership moving (kafkajs refreshes metadata and retries) goes to debug at first', notLeader, 'debug'],
    ['a leader election in progress goes to debug at first', entry(logLevel.ERROR, 'Response Produce(key: 0, version: 7)', 'There is no leader for this topic-partition as we are in the middle of a leadership election'), 'debug'],
    ['a coordinator still loading goes to debug at first', entry(logLevel.ERROR, 'Response JoinGroup(key: 11, version: 5)', "The coordinator is loading and hence can't process requests for this group"), 'debug'],
    ['a refused connection (kafkajs retries) goes to debug at first', refused, 'debug'],
    ['a seed broker kafkajs retries goes to debug at first', seedRefused, 'debug'],
    ['a send kafkajs retries while leadership moves goes to debug at first', entry(logLevel.ERROR, 'Failed to send messages: There is no leader for this topic-partition as we are in the middle of a leadership election', undefined, { retryCount: 0, retryTime: 51 }), 'debug'],
    ['the same words outside a broker answer stay an error', entry(logLevel.ERROR, 'Crash: gave up', NOT_LEADER), 'error'],
    ['an error without a broker answer stays an error', entry(logLevel.ERROR, 'Crash: KafkaJSNumberOfRetriesExceeded'), 'error'],
    ['a consumer crash on a refused connection (the transport acts on it) stays an error', entry(logLevel.ERROR, 'Crash: KafkaJSConnectionError: Connection error: connect ECONNREFUSED 127.0.0.1:1'), 'error'],
    ['a TLS failure is no transient: it stays an error', entry(logLevel.ERROR, 'Connection error: self-signed certificate in certificate chain'), 'error'],
    ['a refused SASL login stays an error', entry(logLevel.ERROR, 'SASL PLAIN authentication failed: Authentication failed'), 'error'],
    ['a transaction told to retry goes to debug', entry(logLevel.ERROR, 'Response AddPartitionsToTxn(key: 24, version: 1)', 'The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing'), 'debug'],
    ['another send that kafkajs will retry is a warning', entry(logLevel.ERROR, 'Failed to send messages: The request included a message larger than the max message size the server will accept', undefined, { retryCount: 0, retryTime: 51 }), 'warn'],
    ['info stays info', entry(logLevel.INFO, 'Consumer has joined the group'), 'info'],
    // The result producer bounds its idempotent retries on purpose (a producer that failed a send is replaced).
    ['kafkajs on bounded retries of an idempotent producer goes to debug', entry(logLevel.WARN, 'Limiting retries for the idempotent producer may invalidate EoS guarantees'), 'debug'],
    ['a result send the transport gave up goes to debug', entry(logLevel.ERROR, SEND_GIVEN_UP, undefined, { retryCount: 2, retryTime: 400 }), 'debug'],
  ])('%s', (_name, e, want) => {
    const { logger, lines } = recording();
    kafkaLogCreator(logger)(logLevel.INFO)(e);
    expect(lines).toEqual([[want, e.log.message]]);
  });

  it('logs nothing without a logger', () => {
    expect(() => kafkaLogCreator(undefined)(logLevel.INFO)(entry(logLevel.ERROR, 'Response Heartbeat'))).not.toThrow();
  });
});

describe('kafkaLogCreator: a transient answer that persists is a warning', () => {
  it('repeating past TRANSIENT_GRACE_MS it is logged at warn once, with its count, then at most once per TRANSIENT_GRACE_MS', () => {
    const { logger, lines, objs } = recording();
    const { log, at } = clocked(logger);
    // kafkajs's retries: every 2 s for 25 s.
    for (let ms = 0; ms <= 25_000; ms += 2_000) {
      at(ms);
      log(notLeader);
    }
    const warns = lines.flatMap(([level, msg], i) => (level === 'warn' ? [{ msg, obj: objs[i] as Record<string, unknown> }] : []));
    expect(lines.filter(([level]) => level !== 'debug' && level !== 'warn')).toEqual([]);
    expect(warns.map((w) => w.msg)).toEqual([
      'Response ListOffsets(key: 2, version: 3): This server is not the leader for that topic-partition (repeated 6 times over 10 s)',
      'Response ListOffsets(key: 2, version: 3): This server is not the leader for that topic-partition (repeated 11 times over 20 s)',
    ]);
    expect(warns[0]?.obj).toMatchObject({ error: NOT_LEADER, repeats: 6, forMs: 10_000 });
  });

  it('after a quiet TRANSIENT_GRACE_MS the same answer starts afresh at debug', () => {
    const { logger, lines } = recording();
    const { log, at } = clocked(logger);
    at(0);
    log(notLeader);
    at(TRANSIENT_GRACE_MS + 1_000);
    log(notLeader);
    at(TRANSIENT_GRACE_MS + 3_000);
    log(notLeader);
    expect(lines.map(([level]) => level)).toEqual(['debug', 'debug', 'debug']);
  });

  it('a refused connection and kafkajs trying another seed broker for it are one condition: one warning, not two', () => {
    const { logger, lines } = recording();
    const { log, at } = clocked(logger);
    for (let ms = 0; ms <= 16_000; ms += 1_000) {
      at(ms);
      log(refused);
      log(seedRefused);
    }
    expect(lines.filter(([level]) => level !== 'debug')).toEqual([
      ['warn', 'Connection error: connect ECONNREFUSED 127.0.0.1:1 (repeated 21 times over 10 s)'],
    ]);
  });

  it('clients sharing a logger (a producer and its admin, the DLQ reader and its replay producer) share the count', () => {
    const { logger, lines } = recording();
    let nowMs = 0;
    const a = kafkaLogCreator(logger, () => nowMs)(logLevel.INFO);
    const b = kafkaLogCreator(logger, () => nowMs)(logLevel.INFO);
    for (; nowMs <= 12_000; nowMs += 1_000) {
      a(refused);
      b(refused);
    }
    expect(lines.filter(([level]) => level === 'warn')).toHaveLength(1);
  });

  it('a group that keeps rebalancing is a warning; a rebalance now and then stays info', () => {
    const { logger, lines } = recording();
    const { log, at } = clocked(logger);
    at(0);
    log(rejoin);
    at(TRANSIENT_GRACE_MS * 3);
    log(rejoin);
    for (let ms = TRANSIENT_GRACE_MS * 6; ms <= TRANSIENT_GRACE_MS * 7; ms += 2_500) {
      at(ms);
      log(rejoin);
    }
    expect(lines.map(([level]) => level)).toEqual(['info', 'info', 'info', 'info', 'info', 'info', 'warn']);
  });

  it('different answers are counted apart', () => {
    const { logger, lines } = recording();
    const { log, at } = clocked(logger);
    at(0);
    log(notLeader);
    at(TRANSIENT_GRACE_MS - 1);
    log(refused);
    at(TRANSIENT_GRACE_MS);
    log(refused);
    expect(lines.map(([level]) => level)).toEqual(['debug', 'debug', 'debug']);
  });
});
