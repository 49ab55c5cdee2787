import type { Admin, Kafka, KafkaMessage } from 'kafkajs';
import { FleetError } from '../../errors/fleet-error.ts';
import { kafkaError } from './kafka-client.ts';
import { whileLeadershipSettles } from './leader-retry.ts';

/** Per partition with records to read: [first offset, end offset). */
export type PartitionRanges = ReadonlyMap<number, { readonly from: number; readonly end: number }>;

/**
 * A topic's partition count (0: it does not exist) and, per partition with records, the offsets
 * from the first record at or after `sinceAt` (else the oldest retained) to its end as of now.
 */
export async function topicRanges(admin: Admin, topic: string, sinceAt?: number): Promise<{ partitions: number; ranges: PartitionRanges }> {
  const ranges = new Map<number, { from: number; end: number }>();
  try {
    // listTopics reads metadata without naming the topic, so a broker with auto-create on does not create it.
    if (!(await admin.listTopics()).includes(topic)) return { partitions: 0, ranges };
    // A topic a worker created a moment ago may not have its leader yet (dlq list right after the first dead letter).
    const ends = await whileLeadershipSettles(() => admin.fetchTopicOffsets(topic));
    const starts = sinceAt === undefined ? undefined : await whileLeadershipSettles(() => admin.fetchTopicOffsetsByTimestamp(topic, sinceAt));
    for (const e of ends) {
      const end = Number(e.high);
      const since = starts?.find((s) => s.partition === e.partition);
      // No record at or after sinceAt: the broker answers the end offset (or -1).
      const from = Math.max(Number(e.low), since === undefined ? 0 : Number(since.offset) < 0 ? end : Number(since.offset));
      if (from < end) ranges.set(e.partition, { from, end });
    }
    return { partitions: ends.length, ranges };
  } catch (err) {
    throw kafkaError(err, `reading the offsets of topic ${topic} failed`);
  }
}

export interface ReadRangesOptions {
  readonly kafka: Kafka;
  readonly topic: string;
  /** The topic as error messages name it ("DLQ topic x"). */
  readonly what: string;
  /** A group of the reader's own: it commits nothing; the caller deletes it afterwards. */
  readonly groupId: string;
  readonly ranges: PartitionRanges;
  /** A read that makes no progress for this long (time spent in `visit` not counted) has stalled. */
  readonly stallMs: number;
  /** Called with each fetch batch's records inside the ranges (per partition, in offset order); true stops the read. */
  readonly visit: (partition: number, messages: KafkaMessage[]) => Promise<boolean>;
}

/**
 * Reads `ranges` of `topic` with a consumer that only reads committed records, until every
 * partition reached its end or `visit` returns true. Each offset is visited at most once.
 */
export async function readRanges(o: ReadRangesOptions): Promise<void> {
  const { topic, groupId, ranges } = o;
  if (ranges.size === 0) return;
  const consumer = o.kafka.consumer({ groupId, allowAutoTopicCreation: false, maxWaitTimeInMs: 500 });
  const open = new Set(ranges.keys());
  // Per partition, the next offset not yet visited: a rejoin restarts from the oldest offset,
  // and what was visited before must not be visited (re-sent) again.
  const next = new Map([...ranges].map(([p, r]) => [p, r.from]));
  let lastProgressAt = Date.now();
  // Visiting may take a while (a replay re-sending: broker retries, slow acks): that is progress,
  // not a stall, and the producer's own timeouts bound it.
  let visiting = 0;
  let failure: unknown;
  let finish: () => void = () => undefined;
  const finished = new Promise<void>((resolve) => (finish = resolve));
  const fail = (err: unknown): void => {
    failure ??= err;
    finish();
  };
  const stalled = setInterval(() => {
    if (visiting > 0 || Date.now() - lastProgressAt < o.stallMs) return;
    fail(new FleetError('TIMEOUT', `reading ${o.what} made no progress for ${o.stallMs / 1000} s (${open.size} partition(s) unfinished); check transport.kafka.brokers`, { retriable: true }));
  }, 1_000);
  try {
    // Partitions close on this event, not in eachBatch: kafkajs skips eachBatch for a batch
    // holding only control records (transactions write them), which may end a range; and a fetch
    // that reaches an open transaction comes back empty with lastOffset at the end.
    consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) => {
      const range = ranges.get(payload.partition);
      if (payload.topic !== topic || range === undefined || Number(payload.lastOffset) < range.end - 1) return;
      lastProgressAt = Date.now();
      open.delete(payload.partition);
      if (open.size === 0) finish();
    });
    // kafkajs does not restart a consumer the broker refused for good (ACLs on the group): say so now.
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      if (!payload.restart) fail(kafkaError(payload.error, `reading ${o.what} failed (group ${groupId}: its principal needs Read and Delete on npu-fleet-dlq-* groups)`));
    });
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch }) => {
        const range = ranges.get(batch.partition);
        if (range === undefined || !open.has(batch.partition) || failure !== undefined) return;
        const from = next.get(batch.partition) ?? range.from;
        const messages: KafkaMessage[] = [];
        for (const message of batch.messages) {
          const offset = Number(message.offset);
          if (offset < from || offset >= range.end) continue;
          next.set(batch.partition, offset + 1);
          messages.push(message);
        }
        visiting++;
        try {
          if (await o.visit(batch.partition, messages)) {
            open.clear();
            finish();
          }
        } catch (err) {
          fail(err);
        } finally {
          visiting--;
          lastProgressAt = Date.now();
        }
      },
    });
    for (const [partition, { from }] of ranges) consumer.seek({ topic, partition, offset: String(from) });
    await finished;
  } finally {
    clearInterval(stalled);
    await consumer.disconnect().catch(() => undefined);
  }
  if (failure !== undefined) throw FleetError.from(failure, 'TRANSPORT_ERROR');
}
