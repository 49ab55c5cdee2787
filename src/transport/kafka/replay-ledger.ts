import { randomUUID } from 'node:crypto';
import type { Admin, Kafka, KafkaMessage } from 'kafkajs';
import { FleetError } from '../../errors/fleet-error.ts';
import { kafkaError, retryTopicCreation } from './kafka-client.ts';
import type { OutgoingMessage } from './kafka-outcomes.ts';
import { alignMarkerTopic, alterCommand, MARKER_RETENTION_MARGIN_MS, markerRetentionMs, markerTopicConfigs, readDlqRetention } from './marker-retention.ts';
import { readRanges, topicRanges, type PartitionRanges } from './read-ranges.ts';

/**
 * Answers about a topic another replay has just created: it is listed before its partitions have
 * taken up leadership, and kafkajs asks for their offsets only once then.
 */
const SETTLING = new Set(['NOT_LEADER_FOR_PARTITION', 'LEADER_NOT_AVAILABLE']);
const SETTLE_TRIES = 10;
const SETTLE_STEP_MS = 200;

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
 * (ReplayProducer): a marker is visible exactly when its re-send is. `dlq purge --expired` writes
 * the same marker with `"purged": true` and no original: the record is passed over as if re-sent
 * (also by versions that know no purge), and `purgedAt` tells the two apart. Replays read the markers
 * (committed ones only) and pass over what has one. A tombstone (null value) for a ref takes its
 * marker back, so the next replay re-sends it.
 *
 * Compaction keeps one marker per record, and time retention derived from the DLQ's
 * (markerRetentionMs: the DLQ's retention.ms plus its segment.ms plus a day, so a marker outlives
 * its record) deletes markers once their records are gone: every replay reads all markers, so
 * markers kept forever (as topics made before this had it: compacted only) make replays slower
 * and the topic larger without bound. A replay that writes markers brings the topic's configs in
 * line with the DLQ's retention (alignMarkerTopic), or warns naming the command when it may not.
 * Only markers of records still in the DLQ ranges read (from the partitions' log-start offsets, or
 * --since, to their end) are held in memory, so markers the DLQ no longer has records for cost
 * reading, not memory; except the original each marker stood for, below.
 *
 * A marker also names the original request message its re-send stood for (`original`: the
 * record's npu-fleet-dlq-source, and `requestId`): without exactlyOnce a worker that dies between
 * writing a DLQ record and committing its offset dead-letters the message again, and the two
 * records need not be read by one replay (a --since window starting between them, a --reason
 * matching one, a replay run before the second was written). Replays pass over a record whose
 * original a marker names, wherever that marker's record lies, so these originals are held for
 * every marker read. The request id is part of it because a deleted and re-created request topic
 * reuses offsets: another message at the same ref is another original.
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
    /** originalKey -> when a replay re-sent that original (through any of its DLQ records). */
    private readonly originals: ReadonlyMap<string, number>,
    /** DLQ ref -> when `dlq purge` discarded it (also in `replayed`: replays pass it over). */
    private readonly purged: ReadonlyMap<string, number> = new Map(),
  ) {}

  /**
   * The committed markers of the DLQ records in `dlqRanges`. `create`: a replay that will write
   * markers creates the marker topic when it is missing (with the DLQ's partition count) and
   * brings its retention in line with the DLQ's, calling `warn` with what it could not do and the
   * command that does it (`bootstrap`: a broker to name in it); list and dry runs only read.
   */
  static async load(o: {
    kafka: Kafka;
    admin: Admin;
    dlqTopic: string;
    dlqPartitions: number;
    dlqRanges: PartitionRanges;
    create: false | { readonly bootstrap: string; readonly warn: (message: string) => void };
    stallMs: number;
  }): Promise<ReplayLedger> {
    const topic = markerTopicOf(o.dlqTopic);
    const found = await markerRanges(o.admin, topic);
    const ranges = found.ranges;
    const partitions = o.create === false ? found.partitions : await ensureMarkerTopic(o.admin, topic, o.dlqTopic, Math.max(1, o.dlqPartitions), found.partitions, o.create);
    const replayed = new Map<string, number>();
    const purged = new Map<string, number>();
    /** DLQ ref -> the original its marker names: per ref, so a tombstone takes it back. */
    const originalOfRef = new Map<string, { key: string; replayedAt: number }>();
    if (ranges.size === 0 || o.dlqRanges.size === 0) return new ReplayLedger(topic, partitions, replayed, new Map());
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
          for (const m of messages) markerInto(replayed, purged, originalOfRef, m, o.dlqTopic, o.dlqRanges);
          return Promise.resolve(false);
        },
      });
    } finally {
      await o.admin.deleteGroups([groupId]).catch(() => undefined);
    }
    const originals = new Map<string, number>();
    for (const { key, replayedAt } of originalOfRef.values()) originals.set(key, Math.min(replayedAt, originals.get(key) ?? Infinity));
    return new ReplayLedger(topic, partitions, replayed, originals, purged);
  }

  /** When `dlq purge` discarded the record `ref` (undefined: it did not). */
  purgedAt(ref: string): number | undefined {
    return this.purged.get(ref);
  }

  /** When a replay re-sent the record `ref` (undefined: none did). */
  replayedAt(ref: string): number | undefined {
    return this.replayed.get(ref);
  }

  /** When a replay re-sent the original `key` (originalKey) through any DLQ record of it (undefined: none did). */
  originalReplayedAt(key: string): number | undefined {
    return this.originals.get(key);
  }

  /**
   * The marker saying the DLQ record `ref` (timestamped `recordAt`) was re-sent to `source` at
   * `replayedAt`. Its record timestamp, which its retention counts from, is never before the
   * record's, also when this host's clock is behind the workers': so it outlives the record.
   */
  marker(ref: string, source: string, replayedAt: number, recordAt?: number, original?: Original | 'purged'): OutgoingMessage {
    const at = parseRef(ref);
    if (this.partitions === 0 || at === undefined) throw new FleetError('INTERNAL', `no replay marker for ${ref} in ${this.topic} (${this.partitions} partitions)`);
    const timestamp = recordAt !== undefined && Number.isFinite(recordAt) ? Math.max(replayedAt, recordAt) : replayedAt;
    // A purge marker names no original: it re-sent nothing, so another record of it is not passed over for it.
    // It keeps `replayedAt`, so versions that know no purge pass the record over too.
    const value =
      original === 'purged' ? { replayedAt, source, purged: true } : original === undefined ? { replayedAt, source } : { replayedAt, source, original: original.ref, requestId: original.requestId };
    return {
      topic: this.topic,
      message: { key: ref, value: JSON.stringify(value), partition: at.partition % this.partitions, timestamp: String(timestamp) },
    };
  }
}

/** The request message a DLQ record holds: where it was (npu-fleet-dlq-source) and its request id. */
export interface Original {
  readonly ref: string;
  readonly requestId: string | undefined;
}

/** One string per original message, for sets and maps. */
export function originalKey(original: Original): string {
  return `${original.ref}\n${original.requestId ?? ''}`;
}

/**
 * Records one marker record (or its tombstone): when it is about a DLQ record inside `dlqRanges`,
 * in `replayed`; the original it names (any DLQ record of `dlqTopic`), in `originalOfRef`.
 */
function markerInto(replayed: Map<string, number>, purged: Map<string, number>, originalOfRef: Map<string, { key: string; replayedAt: number }>, m: KafkaMessage, dlqTopic: string, dlqRanges: PartitionRanges): void {
  const ref = m.key?.toString('utf8');
  const at = ref === undefined ? undefined : parseRef(ref);
  if (ref === undefined || at === undefined || at.topic !== dlqTopic) return;
  const range = dlqRanges.get(at.partition);
  const inRange = range !== undefined && at.offset >= range.from && at.offset < range.end;
  if (m.value === null) {
    replayed.delete(ref);
    purged.delete(ref);
    originalOfRef.delete(ref);
    return;
  }
  let replayedAt = Number(m.timestamp);
  let original: Original | undefined;
  let isPurge = false;
  try {
    const v = JSON.parse(m.value.toString('utf8')) as { replayedAt?: unknown; original?: unknown; requestId?: unknown; purged?: unknown };
    if (typeof v.replayedAt === 'number' && Number.isFinite(v.replayedAt)) replayedAt = v.replayedAt;
    isPurge = v.purged === true;
    if (typeof v.original === 'string') original = { ref: v.original, requestId: typeof v.requestId === 'string' ? v.requestId : undefined };
  } catch {
    // Written by hand or by a later version: the key says it was replayed; the record's time says when.
  }
  if (original !== undefined) originalOfRef.set(ref, { key: originalKey(original), replayedAt });
  // A later marker of the ref without an original (by hand) replaces one with.
  else originalOfRef.delete(ref);
  if (!inRange) return;
  replayed.set(ref, replayedAt);
  if (isPurge) purged.set(ref, replayedAt);
  else purged.delete(ref);
}

/** topicRanges of the marker topic, asked again while its leadership settles (about 10 s at most). */
async function markerRanges(admin: Admin, topic: string): ReturnType<typeof topicRanges> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await topicRanges(admin, topic);
    } catch (err) {
      if (attempt >= SETTLE_TRIES || !(err instanceof FleetError) || !SETTLING.has(String(err.details['kafkaError']))) throw err;
      await new Promise((resolve) => setTimeout(resolve, SETTLE_STEP_MS * attempt));
    }
  }
}

/**
 * The marker topic's partition count once it exists with configs that follow the DLQ's retention
 * (created so when missing, else altered; `existing`: its partition count, 0 when missing).
 */
async function ensureMarkerTopic(admin: Admin, topic: string, dlqTopic: string, dlqPartitions: number, existing: number, o: { readonly bootstrap: string; readonly warn: (message: string) => void }): Promise<number> {
  const dlq = await readDlqRetention(admin, dlqTopic);
  if ('why' in dlq) {
    // Without the DLQ's retention any bound could be too short: markers are kept forever, as before.
    const partitions = existing > 0 ? existing : await createMarkerTopic(admin, topic, dlqPartitions, { 'cleanup.policy': 'compact' });
    const what = existing > 0 ? 'its retention was not checked' : 'it was created compacted only, keeping every marker';
    o.warn(`could not read the retention of the DLQ topic ${dlqTopic} (${dlq.why}), which the replay marker topic ${topic} follows, so ${what}; grant this client DESCRIBE_CONFIGS on ${dlqTopic} and replay again, or run: ${alterCommand(o.bootstrap, topic, { ...markerTopicConfigs(-1), 'retention.ms': 'N' })} with N the DLQ's retention.ms + segment.ms + ${MARKER_RETENTION_MARGIN_MS} (-1 if it keeps records forever)`);
    return partitions;
  }
  const wanted = markerTopicConfigs(markerRetentionMs(dlq));
  if (existing === 0) {
    // Made just now, by this replay or (the topic existed) by one racing it: with `wanted` either
    // way, and its configs may not be readable on every broker yet.
    return createMarkerTopic(admin, topic, dlqPartitions, wanted);
  }
  const warning = await alignMarkerTopic({ admin, topic, dlqTopic, wanted, bootstrap: o.bootstrap });
  if (warning !== undefined) o.warn(warning);
  return existing;
}

/** Creates the marker topic with `configs`; a concurrent replay creating it first is fine. Its partition count. */
async function createMarkerTopic(admin: Admin, topic: string, partitions: number, configs: Readonly<Record<string, string>>): Promise<number> {
  return retryTopicCreation(() => createMarkerTopicOnce(admin, topic, partitions, configs));
}

async function createMarkerTopicOnce(admin: Admin, topic: string, partitions: number, configs: Readonly<Record<string, string>>): Promise<number> {
  try {
    await admin.createTopics({
      topics: [{ topic, numPartitions: partitions, configEntries: Object.entries(configs).map(([name, value]) => ({ name, value })) }],
      waitForLeaders: true,
    });
    return partitions;
  } catch (err) {
    const nested = (err as { errors?: Array<{ type?: string }> }).errors;
    const exists = (err as { type?: string }).type === 'TOPIC_ALREADY_EXISTS' || (Array.isArray(nested) && nested.every((e) => e.type === 'TOPIC_ALREADY_EXISTS'));
    // The other creator used the same count (this code); metadata may lag just after.
    if (exists) return (await markerRanges(admin, topic)).partitions || partitions;
    const settings = Object.entries(configs).map(([k, v]) => `${k}=${v}`).join(', ');
    throw kafkaError(err, `creating the replay marker topic ${topic} failed (create it with ${partitions} partition(s) and ${settings}, or grant this client CREATE on it)`);
  }
}
