import type { Admin, ConfigResourceTypes, DescribeConfigResponse } from 'kafkajs';

/** kafkajs' ConfigResourceTypes.TOPIC: its CommonJS exports name it in a way Node's ESM import cannot see. */
const TOPIC_RESOURCE = 2 as ConfigResourceTypes;
/** kafkajs' ConfigSource.TOPIC_CONFIG: a value set on the topic itself (not a broker default). */
const TOPIC_CONFIG_SOURCE = 1;
/**
 * Added to the DLQ's time bound. The broker deletes a DLQ segment only at its retention check
 * (log.retention.check.interval.ms, 5 min by default) and the workers that write the DLQ stamp
 * their records with their own clocks (a segment rolls by the first record's timestamp): a day
 * covers both, and costs a day of ~100-byte markers.
 */
export const MARKER_RETENTION_MARGIN_MS = 86_400_000;

/** The DLQ topic configs a marker's retention follows (effective values: the topic's or the brokers' default). */
export interface DlqRetention {
  readonly cleanupPolicy: string;
  readonly retentionMs: number;
  readonly segmentMs: number;
}

/**
 * How long the markers of a DLQ must stay: until the DLQ can no longer hold their records, and no
 * longer (-1: forever). A marker is written after its record and stamped no earlier than it
 * (ReplayLedger.marker), so kept as long as the record by time it outlives it. Kept exactly as long
 * would not do: Kafka deletes whole segments, once their newest record is older than retention.ms,
 * so a DLQ record lives up to the span of its segment (segment.ms: a segment rolls once a record
 * arrives that much after its first) past its own retention, while a marker may go as soon as its
 * retention ends. A marker deleted while its record is still in the DLQ would let the next replay
 * re-send that record a second time; a marker kept past its record is only read and ignored.
 *
 * A DLQ bounded by size too (retention.bytes) loses records sooner than this; their markers stay
 * until this time bound, which is harmless (bounded, and they match no record). A DLQ without the
 * delete policy (compact only) or with retention.ms=-1 keeps records forever, so markers too.
 */
export function markerRetentionMs(dlq: DlqRetention): number {
  const deletes = dlq.cleanupPolicy.split(',').some((p) => p.trim() === 'delete');
  if (!deletes || dlq.retentionMs < 0) return -1;
  const ms = dlq.retentionMs + Math.max(0, dlq.segmentMs) + MARKER_RETENTION_MARGIN_MS;
  // Kafka's "forever" spelt Long.MAX_VALUE, or anything near it: -1 means the same and stays exact.
  return Number.isSafeInteger(ms) ? ms : -1;
}

/**
 * The marker topic's configs for `retentionMs`: compacted (one marker per record) and deleted by
 * time. retention.bytes is pinned to -1 since a broker default bounding topics by size would
 * otherwise apply to it (markers deleted while their records stay).
 */
export function markerTopicConfigs(retentionMs: number): Record<string, string> {
  return { 'cleanup.policy': 'compact,delete', 'retention.ms': String(retentionMs), 'retention.bytes': '-1' };
}

/** The kafka-configs.sh command that sets `configs` on `topic` (list values in brackets, as it takes them). */
export function alterCommand(bootstrap: string, topic: string, configs: Readonly<Record<string, string>>): string {
  const values = Object.entries(configs).map(([k, v]) => `${k}=${v.includes(',') ? `[${v}]` : v}`);
  return `kafka-configs.sh --bootstrap-server ${bootstrap} --alter --entity-type topics --entity-name ${topic} --add-config '${values.join(',')}'`;
}

function reasonOf(err: unknown): string {
  const e = err as { type?: unknown; message?: unknown; cause?: { type?: unknown } };
  const type = e.type ?? e.cause?.type;
  return typeof type === 'string' ? type : String(e.message ?? err);
}

type ConfigEntry = DescribeConfigResponse['resources'][number]['configEntries'][number];

async function describeTopic(admin: Admin, topic: string, configNames?: string[]): Promise<ConfigEntry[]> {
  const { resources } = await admin.describeConfigs({ includeSynonyms: false, resources: [{ type: TOPIC_RESOURCE, name: topic, ...(configNames === undefined ? {} : { configNames }) }] });
  const r = resources.find((x) => x.resourceName === topic);
  if (r === undefined || r.errorCode !== 0) throw new Error(r?.errorMessage || `error code ${r?.errorCode ?? 'missing'}`);
  return r.configEntries;
}

/** The DLQ's retention configs, or why they could not be read (DescribeConfigs refused, say). */
export async function readDlqRetention(admin: Admin, dlqTopic: string): Promise<DlqRetention | { readonly why: string }> {
  try {
    const entries = await describeTopic(admin, dlqTopic, ['cleanup.policy', 'retention.ms', 'segment.ms']);
    const value = (name: string): string | undefined => entries.find((e) => e.configName === name)?.configValue ?? undefined;
    const cleanupPolicy = value('cleanup.policy');
    const retentionMs = Number(value('retention.ms'));
    const segmentMs = Number(value('segment.ms'));
    if (cleanupPolicy === undefined || !Number.isFinite(retentionMs) || !Number.isFinite(segmentMs)) throw new Error('the brokers did not answer cleanup.policy, retention.ms and segment.ms');
    return { cleanupPolicy, retentionMs, segmentMs };
  } catch (err) {
    return { why: reasonOf(err) };
  }
}

function sameValue(name: string, current: string | null | undefined, wanted: string): boolean {
  if (current === null || current === undefined) return false;
  if (name === 'cleanup.policy') {
    const norm = (v: string): string => v.split(',').map((p) => p.trim()).sort().join(',');
    return norm(current) === norm(wanted);
  }
  return current.trim() === wanted;
}

export interface AlignMarkerTopic {
  readonly admin: Admin;
  readonly topic: string;
  readonly dlqTopic: string;
  readonly wanted: Readonly<Record<string, string>>;
  /** A broker for the command the warning names. */
  readonly bootstrap: string;
}

/**
 * Brings an existing marker topic's configs to `wanted` (the topic belongs to the replays: a topic
 * created by an older version is compacted only and keeps every marker forever; a DLQ whose
 * retention was raised since needs longer-lived markers). Returns a warning when it could not
 * (AlterConfigs refused, mostly: the principal lacks ALTER_CONFIGS on the topic), naming the command
 * that does it; the replay goes on either way, its markers as safe as before.
 */
export async function alignMarkerTopic(o: AlignMarkerTopic): Promise<string | undefined> {
  const fix = alterCommand(o.bootstrap, o.topic, o.wanted);
  let entries: ConfigEntry[];
  try {
    entries = await describeTopic(o.admin, o.topic);
  } catch (err) {
    return `could not read the configs of the replay marker topic ${o.topic} (${reasonOf(err)}), so its retention was not checked; grant this client DESCRIBE_CONFIGS on it, or run: ${fix}`;
  }
  const current = new Map(entries.map((e) => [e.configName, e.configValue as string | null]));
  const off = Object.entries(o.wanted).filter(([name, value]) => !sameValue(name, current.get(name), value));
  if (off.length === 0) return undefined;
  // kafkajs has no IncrementalAlterConfigs, and AlterConfigs replaces every value set on the topic:
  // the others set there (read just now) go back unchanged alongside ours.
  const kept = entries.filter((e) => e.configSource === TOPIC_CONFIG_SOURCE && !(e.configName in o.wanted));
  const was = off.map(([name]) => `${name}=${current.get(name) ?? '?'}`).join(', ');
  // Retention applies only with the delete policy: a compact-only topic keeps every marker.
  const deletes = (current.get('cleanup.policy') ?? '').split(',').some((p) => p.trim() === 'delete');
  const currentMs = Number(current.get('retention.ms'));
  const wantedMs = Number(o.wanted['retention.ms']);
  const early = deletes && ((currentMs >= 0 && (wantedMs < 0 || currentMs < wantedMs)) || Number(current.get('retention.bytes')) >= 0);
  const risk = early
    ? `its markers may be deleted while their records are still in ${o.dlqTopic}, and a later replay would re-send those records`
    : 'it keeps markers longer than their records (it grows with every replay)';
  const problem = `the replay marker topic ${o.topic} has ${was} where ${o.dlqTopic}'s retention calls for ${off.map(([n, v]) => `${n}=${v}`).join(', ')}: ${risk}`;
  if (kept.some((e) => e.isSensitive || e.configValue === null)) return `${problem}; it has a sensitive config this client cannot read back, so it was left alone; run: ${fix}`;
  try {
    await o.admin.alterConfigs({
      validateOnly: false,
      resources: [{ type: TOPIC_RESOURCE, name: o.topic, configEntries: [...kept.map((e) => ({ name: e.configName, value: e.configValue })), ...Object.entries(o.wanted).map(([name, value]) => ({ name, value }))] }],
    });
    return undefined;
  } catch (err) {
    const reason = reasonOf(err);
    if (/AUTHORIZATION_FAILED/.test(reason)) return `${problem}; this client may not change it. The replay goes on; grant this client ALTER_CONFIGS on topic ${o.topic}, or run: ${fix}`;
    return `${problem}; changing it failed (${reason}). The replay goes on; run: ${fix}`;
  }
}
