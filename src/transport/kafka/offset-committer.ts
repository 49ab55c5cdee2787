import type { Admin, Consumer } from 'kafkajs';
import type { TrackedPartition } from './kafka-eos.ts';
import { kafkaError } from './kafka-client.ts';

/** Key of one topic-partition in this transport's maps. */
export const tpKey = (topic: string, partition: number): string => `${topic}\u0000${partition}`;

interface PendingCommit {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
}

/** Commit metadata stays under the brokers' default offset.metadata.max.bytes (4096). */
const MAX_METADATA_CHARS = 3_500;

/**
 * Commit metadata: the highest offset delivered so far, then the suspects at or past the commit
 * position as `offset:count` (times each was on a device that hung): `"812"` or
 * `"812;s=790:1,791:2"`. Plain numbers (what earlier versions wrote) still read.
 */
export function encodeCommitMetadata(highest: number, suspects: ReadonlyMap<number, number> | undefined, from: number): string {
  const live = [...(suspects ?? [])].filter(([offset]) => offset >= from);
  if (live.length === 0) return String(highest);
  // Over the budget (a hung batch of hundreds from one partition): the higher counts stay, since
  // they are the likelier poison and the nearer to quarantine; ties keep the earlier offsets.
  live.sort((a, b) => b[1] - a[1] || a[0] - b[0]);
  const kept: Array<[number, number]> = [];
  let length = String(highest).length + 3;
  for (const [o, n] of live) {
    const add = `${o}:${n}`.length + 1;
    if (length + add > MAX_METADATA_CHARS) break;
    kept.push([o, n]);
    length += add;
  }
  kept.sort((a, b) => a[0] - b[0]);
  return `${highest};s=${kept.map(([o, n]) => `${o}:${n}`).join(',')}`;
}

export function decodeCommitMetadata(raw: string | null | undefined): { highest: number | undefined; suspects: Map<number, number> } {
  const suspects = new Map<number, number>();
  const [head, ...rest] = (raw ?? '').split(';');
  const highest = head === undefined || head === '' ? NaN : Number(head);
  for (const part of rest) {
    if (!part.startsWith('s=')) continue;
    for (const pair of part.slice(2).split(',')) {
      const m = /^(\d+):(\d+)$/.exec(pair);
      const o = Number(m?.[1]);
      const n = Number(m?.[2]);
      if (Number.isSafeInteger(o) && Number.isSafeInteger(n) && n > 0) suspects.set(o, n);
    }
  }
  return { highest: Number.isSafeInteger(highest) ? highest : undefined, suspects };
}

/**
 * At-least-once commits: each partition up to the contiguous prefix of settled deliveries, after
 * their results were acknowledged. Serialized: each caller waits for a commit that started after
 * its own deliveries were settled. A failed commit is kept and retried with the next one.
 * Every commit carries metadata (encodeCommitMetadata): the highest offset delivered, so a worker
 * that takes the partition over after a crash can mark what the dead one had received as
 * redelivered; and the suspects, so a request that hung a device is known to the next owner.
 */
export class OffsetCommitter {
  private chain: Promise<void> = Promise.resolve();
  private readonly pending = new Map<string, PendingCommit>();
  /** Per partition: offset -> times it was on a device that hung. */
  private readonly suspects = new Map<string, Map<number, number>>();

  constructor(
    /** This worker's partitions, by tpKey (its current assignment). */
    private readonly partitions: ReadonlyMap<string, TrackedPartition>,
    private readonly consumer: () => Consumer | undefined,
    /** False in exactly-once mode: settled prefixes leave in transactions, not here. */
    private readonly ownsPrefixes: () => boolean = () => true,
  ) {}

  /** A commit failed earlier and waits for the next try. */
  get hasPending(): boolean {
    return this.pending.size > 0;
  }

  /** The partition was revoked: its new owner commits it (and reads its suspects). */
  forget(key: string): void {
    this.pending.delete(key);
    this.suspects.delete(key);
  }

  /** Suspects a previous owner recorded (from the commit metadata read at assignment). */
  adoptSuspects(key: string, suspects: ReadonlyMap<number, number>): void {
    if (suspects.size > 0 && !this.suspects.has(key)) this.suspects.set(key, new Map(suspects));
  }

  suspectCount(key: string, offset: number): number {
    return this.suspects.get(key)?.get(offset) ?? 0;
  }

  /**
   * Counts one more hang against each offset and commits those partitions at once (at their
   * current position if nothing new settled), so the count outlives this worker.
   */
  markSuspect(offsets: ReadonlyArray<{ key: string; offset: number }>): Promise<void> {
    for (const { key, offset } of offsets) {
      const part = this.partitions.get(key);
      if (part === undefined) continue;
      let map = this.suspects.get(key);
      if (map === undefined) this.suspects.set(key, (map = new Map()));
      map.set(offset, (map.get(offset) ?? 0) + 1);
      if (!this.pending.has(key)) this.pending.set(key, { topic: part.topic, partition: part.partition, offset: part.tracker.uncommittedFrom });
    }
    return this.commit();
  }

  commit(): Promise<void> {
    const next = this.chain.then(() => this.run());
    this.chain = next.catch(() => undefined);
    return next;
  }

  private async run(): Promise<void> {
    for (const part of this.ownsPrefixes() ? this.partitions.values() : []) {
      const prefix = part.tracker.takePrefix();
      if (prefix !== undefined) this.pending.set(tpKey(part.topic, part.partition), { topic: part.topic, partition: part.partition, offset: prefix.commitNext });
    }
    const consumer = this.consumer();
    if (this.pending.size === 0 || consumer === undefined) return;
    const offsets = [...this.pending.values()];
    this.pending.clear();
    const metadataOf = (o: PendingCommit): string => {
      const key = tpKey(o.topic, o.partition);
      return encodeCommitMetadata(this.partitions.get(key)?.tracker.highestDelivered ?? o.offset - 1, this.suspects.get(key), o.offset);
    };
    try {
      await consumer.commitOffsets(offsets.map((o) => ({ topic: o.topic, partition: o.partition, offset: String(o.offset), metadata: metadataOf(o) })));
    } catch (err) {
      for (const o of offsets) {
        const key = tpKey(o.topic, o.partition);
        const newer = this.pending.get(key);
        if (this.partitions.has(key) && (newer === undefined || newer.offset < o.offset)) this.pending.set(key, o);
      }
      throw kafkaError(err, 'results are published but committing their offsets failed (retried with the next settle)');
    }
    // Committed past: those offsets will never be delivered again.
    for (const o of offsets) {
      const map = this.suspects.get(tpKey(o.topic, o.partition));
      if (map !== undefined) for (const offset of map.keys()) if (offset < o.offset) map.delete(offset);
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
