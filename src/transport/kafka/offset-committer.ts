import type { Admin, Consumer } from 'kafkajs';
import type { TrackedPartition } from './kafka-eos.ts';
import { kafkaError } from './kafka-client.ts';

/** Key of one topic-partition in this transport's maps. */
export const tpKey = (topic: string, partition: number): string => `${topic}\u0000${partition}`;

interface PendingCommit {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  readonly metadata: string;
}

/**
 * At-least-once commits: each partition up to the contiguous prefix of settled deliveries, after
 * their results were acknowledged. Serialized: each caller waits for a commit that started after
 * its own deliveries were settled. A failed commit is kept and retried with the next one.
 * Every commit carries the highest offset delivered so far as metadata, so a worker that takes
 * over the partition after a crash can mark what the dead one had received as redelivered.
 */
export class OffsetCommitter {
  private chain: Promise<void> = Promise.resolve();
  private readonly pending = new Map<string, PendingCommit>();

  constructor(
    /** This worker's partitions, by tpKey (its current assignment). */
    private readonly partitions: ReadonlyMap<string, TrackedPartition>,
    private readonly consumer: () => Consumer | undefined,
  ) {}

  /** A commit failed earlier and waits for the next try. */
  get hasPending(): boolean {
    return this.pending.size > 0;
  }

  /** The partition was revoked: its new owner commits it. */
  forget(key: string): void {
    this.pending.delete(key);
  }

  commit(): Promise<void> {
    const next = this.chain.then(() => this.run());
    this.chain = next.catch(() => undefined);
    return next;
  }

  private async run(): Promise<void> {
    for (const part of this.partitions.values()) {
      const prefix = part.tracker.takePrefix();
      if (prefix !== undefined) {
        this.pending.set(tpKey(part.topic, part.partition), {
          topic: part.topic,
          partition: part.partition,
          offset: prefix.commitNext,
          metadata: String(part.tracker.highestDelivered),
        });
      }
    }
    const consumer = this.consumer();
    if (this.pending.size === 0 || consumer === undefined) return;
    const offsets = [...this.pending.values()];
    this.pending.clear();
    try {
      await consumer.commitOffsets(offsets.map((o) => ({ topic: o.topic, partition: o.partition, offset: String(o.offset), metadata: o.metadata })));
    } catch (err) {
      for (const o of offsets) {
        const key = tpKey(o.topic, o.partition);
        const newer = this.pending.get(key);
        if (this.partitions.has(key) && (newer === undefined || newer.offset < o.offset)) this.pending.set(key, o);
      }
      throw kafkaError(err, 'results are published but committing their offsets failed (retried with the next settle)');
    }
  }
}

/** Unconsumed requests per model (log end − committed offset), for the source-lag gauge. */
export async function consumerLag(admin: Admin, groupId: string, topicModels: ReadonlyMap<string, string>): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  const topics = [...topicModels.keys()];
  try {
    const committed = await admin.fetchOffsets({ groupId, topics });
    const committedOf = new Map<string, number>();
    for (const t of committed) for (const p of t.partitions) committedOf.set(tpKey(t.topic, p.partition), Number(p.offset));
    for (const topic of topics) {
      const model = topicModels.get(topic) as string;
      const ends = await admin.fetchTopicOffsets(topic);
      let lag = 0;
      for (const p of ends) {
        const c = committedOf.get(tpKey(topic, p.partition)) ?? -1;
        lag += Math.max(0, Number(p.high) - Math.max(c, Number(p.low)));
      }
      out[model] = (out[model] ?? 0) + lag;
    }
  } catch (err) {
    throw kafkaError(err, 'reading the consumer lag failed');
  }
  return out;
}
