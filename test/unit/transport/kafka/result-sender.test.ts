import type { Message, PartitionMetadata } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { SEND_GIVEN_UP } from '../../../../src/transport/kafka/kafka-client.ts';
import { retryStablePartitioner } from '../../../../src/transport/kafka/result-sender.ts';

const partitionMetadata = (n: number): PartitionMetadata[] =>
  Array.from({ length: n }, (_, partitionId) => ({ partitionId, leader: 1, replicas: [1], isr: [1], offlineReplicas: [], partitionErrorCode: 0 }));

describe('retryStablePartitioner (the at-least-once producer: kafkajs partitions each attempt again)', () => {
  it('puts a keyless message (a DLQ record) on the partition of its first attempt, each attempt', () => {
    const pick = retryStablePartitioner({ givenUp: false })();
    const metadata = partitionMetadata(4);
    const messages: Message[] = Array.from({ length: 3 }, (_, i) => ({ key: null, value: Buffer.from(`dlq${i}`) }));
    const attempt = (): number[] => messages.map((message) => pick({ topic: 'm.dlq', partitionMetadata: metadata, message }));
    const first = attempt();
    // kafkajs's default round-robins keyless messages: 3 messages on 4 partitions move on each attempt.
    expect(attempt()).toEqual(first);
    expect(attempt()).toEqual(first);
    // A new message is partitioned as before (round robin): not all on one partition.
    const others = Array.from({ length: 4 }, (_, i) => pick({ topic: 'm.dlq', partitionMetadata: metadata, message: { key: null, value: Buffer.from(`new${i}`) } }));
    expect(new Set(others).size).toBe(4);
  });

  it('partitions a keyed message by its key each attempt, and a keyless one again when its partition is gone', () => {
    const pick = retryStablePartitioner({ givenUp: false })();
    const keyed: Message = { key: 'stream-7', value: Buffer.from('r') };
    const onFour = pick({ topic: 'm.replies', partitionMetadata: partitionMetadata(4), message: keyed });
    expect(pick({ topic: 'm.replies', partitionMetadata: partitionMetadata(4), message: keyed })).toBe(onFour);
    // A keyless message first put past partition 0 (round robin gets there within 2 messages).
    let moved: Message | undefined;
    for (let i = 0; i < 4 && moved === undefined; i++) {
      const message: Message = { key: null, value: Buffer.from(`d${i}`) };
      if (pick({ topic: 'm.dlq', partitionMetadata: partitionMetadata(4), message }) > 0) moved = message;
    }
    expect(moved).toBeDefined();
    // The topic was created again with 1 partition: its old one does not exist.
    expect(pick({ topic: 'm.dlq', partitionMetadata: partitionMetadata(1), message: moved as Message })).toBe(0);
  });

  it("stops a given-up send's attempts with an error kafkajs does not retry", () => {
    const state = { givenUp: false };
    const pick = retryStablePartitioner(state)();
    const args = { topic: 'm.replies', partitionMetadata: partitionMetadata(2), message: { key: 'k', value: Buffer.from('r') } };
    expect(pick(args)).toBeGreaterThanOrEqual(0);
    state.givenUp = true;
    let thrown: unknown;
    try {
      pick(args);
    } catch (err) {
      thrown = err;
    }
    expect((thrown as Error).message).toBe(SEND_GIVEN_UP);
    expect((thrown as { retriable?: boolean }).retriable).toBe(false);
  });
});
