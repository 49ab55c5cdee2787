import { describe, expect, it } from 'vitest';
import { FleetError } from '../../../../src/errors/fleet-error.ts';
import { replayTakenOver, replayTransactionalId, transactionsRefused } from '../../../../src/transport/kafka/replay-producer.ts';

/** A broker answer as kafkajs raises it (KafkaJSProtocolError), wrapped the way its retrier gives up on it. */
function brokerAnswer(type: string, message: string): Error {
  const answer = Object.assign(new Error(message), { name: 'KafkaJSProtocolError', type, retriable: false });
  return Object.assign(new Error(message), { name: 'KafkaJSNumberOfRetriesExceeded', cause: answer });
}

const id = replayTransactionalId('fleet.m.dlq');

describe('transactionsRefused: a broker that cannot run the replay transactions is named with its fix', () => {
  it('no transaction coordinator (fewer brokers than transaction.state.log.replication.factor) names the settings', () => {
    const e = transactionsRefused(brokerAnswer('GROUP_COORDINATOR_NOT_AVAILABLE', 'The group coordinator is not available'), id);
    expect(e).toBeInstanceOf(FleetError);
    expect(e.message).toMatch(/dlq replay needs Kafka transactions/);
    expect(e.message).toMatch(/transaction\.state\.log\.replication\.factor \(default 3\).*transaction\.state\.log\.min\.isr/);
    // It may only be starting up.
    expect(e.retriable).toBe(true);
    expect(e.details).toMatchObject({ transactionalId: 'npu-fleet-dlq-replay-fleet.m.dlq' });
  });

  it('a transactional id the ACLs refuse names the grant and the id prefix', () => {
    const e = transactionsRefused(brokerAnswer('TRANSACTIONAL_ID_AUTHORIZATION_FAILED', 'Transactional Id authorization failed'), id);
    expect(e.message).toMatch(/grant this client WRITE and DESCRIBE on TransactionalId npu-fleet-dlq-replay-fleet\.m\.dlq \(or the prefix npu-fleet-dlq-replay-\)/);
    expect(e.retriable).toBe(false);
  });

  it('brokers without transactions at all (UNSUPPORTED_VERSION) say to upgrade', () => {
    expect(transactionsRefused(brokerAnswer('UNSUPPORTED_VERSION', 'The version of API is not supported'), id).message).toMatch(/older than Kafka 0\.11/);
  });

  it('any other failure keeps the broker answer and its retriability, naming the id', () => {
    const e = transactionsRefused(Object.assign(new Error('Connection timeout'), { name: 'KafkaJSConnectionError' }), id);
    expect(e.message).toMatch(/starting transactional id npu-fleet-dlq-replay-fleet\.m\.dlq failed: Connection timeout/);
    expect(e.retriable).toBe(true);
  });
});

describe('replayTakenOver', () => {
  it('finds the takeover mark through wrappers, and nothing else counts as one', () => {
    const fenced = new FleetError('TRANSPORT_ERROR', 'fenced', { details: { replayTakenOver: true } });
    expect(replayTakenOver(fenced)).toBe(true);
    expect(replayTakenOver(new FleetError('TRANSPORT_ERROR', 'wrapped', { cause: fenced }))).toBe(true);
    expect(replayTakenOver(new FleetError('TRANSPORT_ERROR', 'other'))).toBe(false);
    expect(replayTakenOver(brokerAnswer('INVALID_PRODUCER_EPOCH', 'old epoch'))).toBe(false);
    expect(replayTakenOver(undefined)).toBe(false);
  });
});
