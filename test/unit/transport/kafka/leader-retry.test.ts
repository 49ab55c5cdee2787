import { KafkaJSNonRetriableError, KafkaJSNumberOfRetriesExceeded, KafkaJSProtocolError } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { isLeadershipSettling, whileLeadershipSettles } from '../../../../src/transport/kafka/leader-retry.ts';

// kafkajs builds its protocol errors from the broker's code: type, code and retriable come along.
const protocolError = (type: string, code: number, retriable = true): KafkaJSProtocolError =>
  new KafkaJSProtocolError(Object.assign(new Error(`broker answered ${type}`), { type, code, retriable }) as unknown as Error);

describe('whileLeadershipSettles', () => {
  it.each([
    ['NOT_LEADER_FOR_PARTITION', 6, true],
    ['LEADER_NOT_AVAILABLE', 5, true],
    ['UNKNOWN_LEADER_EPOCH', 75, true],
    ['TOPIC_AUTHORIZATION_FAILED', 29, false],
    ['UNKNOWN_TOPIC_OR_PARTITION', 3, false],
  ] as const)('%s (code %i) counts as leadership settling: %s', (type, code, settling) => {
    expect(isLeadershipSettling(protocolError(type, code))).toBe(settling);
  });

  it('finds the protocol error under kafkajs wrappers', () => {
    const inner = protocolError('NOT_LEADER_FOR_PARTITION', 6);
    expect(isLeadershipSettling(new KafkaJSNumberOfRetriesExceeded(inner, { retryCount: 8, retryTime: 5000 }))).toBe(true);
    expect(isLeadershipSettling(new Error('socket closed'))).toBe(false);
    expect(isLeadershipSettling(undefined)).toBe(false);
  });

  it('tries again while the leader settles, and returns the answer that comes', async () => {
    let calls = 0;
    const answer = await whileLeadershipSettles(async () => {
      calls++;
      if (calls < 3) throw protocolError('NOT_LEADER_FOR_PARTITION', 6);
      return 'offsets';
    }, 5_000);
    expect(answer).toBe('offsets');
    expect(calls).toBe(3);
  });

  it('throws any other failure at once', async () => {
    let calls = 0;
    const denied = protocolError('TOPIC_AUTHORIZATION_FAILED', 29, false);
    await expect(
      whileLeadershipSettles(async () => {
        calls++;
        throw new KafkaJSNonRetriableError(denied);
      }, 5_000),
    ).rejects.toThrow(/TOPIC_AUTHORIZATION_FAILED/);
    expect(calls).toBe(1);
  });

  it('gives up past its budget with the last failure', async () => {
    let calls = 0;
    const startedAt = Date.now();
    await expect(
      whileLeadershipSettles(async () => {
        calls++;
        throw protocolError('LEADER_NOT_AVAILABLE', 5);
      }, 300),
    ).rejects.toThrow(/LEADER_NOT_AVAILABLE/);
    expect(calls).toBeGreaterThanOrEqual(3);
    expect(Date.now() - startedAt).toBeLessThan(2_000);
  });
});
