// Reads what a Kafka topic holds for read_committed consumers (the workers): replays write in
// transactions, so a topic's end offset also counts commit/abort markers and aborted records, and
// waiting for that many messages would never end.
import type { IHeaders } from 'kafkajs';
import { uniqueName } from '../../helpers/services.ts';
import { whileLeadershipSettles } from '../../../src/transport/kafka/leader-retry.ts';
import { adminKafka } from './kafka-harness.ts';

export interface ReadMessage {
  readonly partition: number;
  readonly key: Buffer | null;
  readonly value: Buffer | null;
  readonly headers: IHeaders;
}

/**
 * Returns once no transaction of `transactionalId` is in progress. A transaction's commit returns
 * before its markers are written, and until then read_committed readers neither see its records
 * nor count them in the end offsets: so readCommitted right after a replay might miss the last
 * chunk. Starting the id (InitProducerId) waits for that; it fences whatever still uses the id.
 */
export async function transactionsSettled(transactionalId: string): Promise<void> {
  const producer = adminKafka().producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  try {
    const txn = await producer.transaction();
    await txn.abort();
  } finally {
    await producer.disconnect();
  }
}

/** Every committed message of `topic` up to its end as of the call, per partition in offset order (partitions in turn). */
export async function readCommitted(topic: string, timeoutMs = 30_000): Promise<ReadMessage[]> {
  const kafka = adminKafka();
  const admin = kafka.admin();
  await admin.connect();
  const ends = new Map<number, number>();
  try {
    for (const p of await whileLeadershipSettles(() => admin.fetchTopicOffsets(topic))) if (Number(p.high) > Number(p.low)) ends.set(p.partition, Number(p.high));
  } finally {
    await admin.disconnect();
  }
  const byPartition = new Map<number, ReadMessage[]>();
  if (ends.size === 0) return [];
  const open = new Set(ends.keys());
  const next = new Map<number, number>();
  const consumer = kafka.consumer({ groupId: uniqueName('kdl-reader'), maxWaitTimeInMs: 100 });
  await consumer.connect();
  try {
    // Fired also for batches of control records only, which eachBatch never sees.
    consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) => {
      const end = ends.get(payload.partition);
      if (end !== undefined && Number(payload.lastOffset) >= end - 1) open.delete(payload.partition);
    });
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      eachBatch: async ({ batch }) => {
        const end = ends.get(batch.partition) ?? 0;
        const list = byPartition.get(batch.partition) ?? [];
        for (const m of batch.messages) {
          // A batch fetched again (a rejoin) must not count twice: a duplicate is what the tests look for.
          const offset = Number(m.offset);
          if (offset >= end || offset < (next.get(batch.partition) ?? 0)) continue;
          next.set(batch.partition, offset + 1);
          list.push({ partition: batch.partition, key: m.key, value: m.value, headers: m.headers ?? {} });
        }
        byPartition.set(batch.partition, list);
      },
    });
    const deadline = Date.now() + timeoutMs;
    while (open.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    if (open.size > 0) throw new Error(`reading ${topic}: partitions ${[...open].join(', ')} did not reach their end in ${timeoutMs} ms`);
  } finally {
    await consumer.disconnect();
  }
  return [...byPartition.keys()].sort((a, b) => a - b).flatMap((p) => byPartition.get(p) ?? []);
}
