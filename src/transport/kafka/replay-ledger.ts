import { randomUUID } from 'node:crypto';
import type { Admin, Kafka, KafkaMessage } from 'kafkajs';
import { FleetError } from '../../errors/fleet-error.ts';
import { kafkaError } from './kafka-client.ts';
import type { OutgoingMessage } from './kafka-outcomes.ts';
import { readRanges, topicRanges, type PartitionRanges } from './read-ranges.ts';

/** The marker topic of a DLQ topic: `<dlq topic>.replayed`. */
export function markerTopicOf(dlqTopic: string): string {
  return `${dlqTopic}.replayed`;
}

/** "topic/partition/offset" (Kafka topic names have no '/') split up; undefined when it is not one. */
function parseRef(ref: string): { topic: string; partition: number; offset: number } | undefined {
  const o = ref.lastIndexOf('/');
  const p = ref.lastIndexOf('/', o - 1);
  const partition = Number(ref.slice(p + 1, o));
  const offset = Number(ref.slice(o + 1));
  if (p <= 0 || !Number.isInteger(partition) || !Number.isInteger(offset)) return undefined;
  return { topic: ref.slice(0, p), partition, offset };
}

/**
 * Which records of a model's Kafka DLQ a replay already re-sent. The DLQ is a log and keeps a
 * replayed record, so each replay writes a marker for every record it re-sends to the compacted
 * topic `<dlq topic>.replayed` (key: the record's ref `topic/partition/offset`; value:
 * `{"replayedAt": epoch ms, "source": topic}`), in the same transaction as the re-send itself
 * (ReplayProducer): a marker is visible exactly when its re-send is. Replays read the markers
 * (committed ones only) and pass over what has one. Compaction keeps one marker per record; markers
 * of records gone from the DLQ by retention stay (about 100 bytes each) and are ignored. A
 * tombstone (null value) for a ref takes its marker back, so the next replay re-sends it.
 *
 * Markers of DLQ partition p go to marker partition p modulo the marker topic's partition count,
 * so a record's markers always share a partition (compaction works per partition).
 */
export class ReplayLedger {
  private constructor(
    readonly topic: string,
    /** Partitions of the marker topic (0: it does not exist, nothing was replayed). */
    private readonly partitions: number,
    /** DLQ ref -> when a replay re-sent it. */
    private readonly replayed: ReadonlyMap<string, number>,
  ) {}

  /**
   * The committed markers of the DLQ records in `dlqRanges`. `create`: a replay that will write
   * markers creates the marker topic when it is missing (with the DLQ's partition count);
   * list and dry runs only read.
   */
  static async load(o: { kafka: Kafka; admin: Admin; dlqTopic: string; dlqPartitions: number; dlqRanges: PartitionRanges; create: boolean; stallMs: number }): Promise<ReplayLedger> {
    const topic = markerTopicOf(o.dlqTopic);
    const found = await topicRanges(o.admin, topic);
    const ranges = found.ranges;
    const partitions = found.partitions === 0 && o.create ? await createMarkerTopic(o.admin, topic, Math.max(1, o.dlqPartitions)) : found.partitions;
    const replayed = new Map<string, number>();
    if (ranges.size === 0 || o.dlqRanges.size === 0) return new ReplayLedger(topic, partitions, replayed);
    const groupId = `npu-fleet-dlq-${randomUUID()}`;
    try {
      await readRanges({
        kafka: o.kafka,
        topic,
        what: `replay marker topic ${topic}`,
        groupId,
        ranges,
        stallMs: o.stallMs,
        visit: (_partition, messages) => {
          for (const m of messages) markerInto(replayed, m, o.dlqTopic, o.dlqRanges);
          return Promise.resolve(false);
        },
      });
    } finally {
      await o.admin.deleteGroups([groupId]).catch(() => undefined);
    }
    return new ReplayLedger(topic, partitions, replayed);
  }

  /** When a replay re-sent the record `ref` (undefined: none did). */
  replayedAt(ref: string): number | undefined {
    return this.replayed.get(ref);
  }

  /** The marker saying the DLQ record `ref` was re-sent to `source` at `replayedAt`. */
  marker(ref: string, source: string, replayedAt: number): OutgoingMessage {
    const at = parseRef(ref);
    if (this.partitions === 0 || at === undefined) throw new FleetError('INTERNAL', `no replay marker for ${ref} in ${this.topic} (${this.partitions} partitions)`);
    return {
      topic: this.topic,
      message: { key: ref, value: JSON.stringify({ replayedAt, source }), partition: at.partition % this.partitions, timestamp: String(replayedAt) },
    };
  }
}

/** Records one marker record (or its tombstone) when it is about a DLQ record inside `dlqRanges`. */
function markerInto(replayed: Map<string, number>, m: KafkaMessage, dlqTopic: string, dlqRanges: PartitionRanges): void {
  const ref = m.key?.toString('utf8');
  const at = ref === undefined ? undefined : parseRef(ref);
  const range = at === undefined || at.topic !== dlqTopic ? undefined : dlqRanges.get(at.partition);
  if (ref === undefined || at === undefined || range === undefined || at.offset < range.from || at.offset >= range.end) return;
  if (m.value === null) {
    replayed.delete(ref);
    return;
  }
  let replayedAt = Number(m.timestamp);
  try {
    const v = JSON.parse(m.value.toString('utf8')) as { replayedAt?: unknown };
    if (typeof v.replayedAt === 'number' && Number.isFinite(v.replayedAt)) replayedAt = v.replayedAt;
  } catch {
    // Written by hand or by a later version: the key says it was replayed; the record's time says when.
  }
  replayed.set(ref, replayedAt);
}

/** Creates the compacted marker topic; a concurrent replay creating it first is fine. Its partition count. */
async function createMarkerTopic(admin: Admin, topic: string, partitions: number): Promise<number> {
  try {
    await admin.createTopics({
      topics: [{ topic, numPartitions: partitions, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] }],
      waitForLeaders: true,
    });
    return partitions;
  } catch (err) {
    const nested = (err as { errors?: Array<{ type?: string }> }).errors;
    const exists = (err as { type?: string }).type === 'TOPIC_ALREADY_EXISTS' || (Array.isArray(nested) && nested.every((e) => e.type === 'TOPIC_ALREADY_EXISTS'));
    // The other creator used the same count (this code); metadata may lag just after.
    if (exists) return (await topicRanges(admin, topic)).partitions || partitions;
    throw kafkaError(err, `creating the replay marker topic ${topic} failed (create it with cleanup.policy=compact, or grant this client CREATE on it)`);
  }
}
