import type { Admin } from 'kafkajs';

/** kafkajs' ConfigResourceTypes.TOPIC: its CommonJS exports name it in a way Node's ESM import cannot see. */
const TOPIC_RESOURCE = 2;

/** The brokers' default message.max.bytes: what a topic takes when its config cannot be read. */
const BROKER_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588;

/** A record batch's own header (61 bytes) plus one record's framing, key and headers. */
export const RECORD_SLACK_BYTES = 4096;

/**
 * The per-partition fetch size the consumer uses. Per KIP-74 the broker exceeds a partition's
 * limit only for the first non-empty partition of a fetch; on any other, a record batch larger
 * than the limit gives nothing usable. Requests larger than the limit then come one per fetch
 * round trip (measured on 8 busy partitions: 1.00 request per fetch against 8.00), so the limit is
 * raised to hold the largest request the worker can be sent, which no topic takes beyond its
 * max.message.bytes. Smaller requests keep the configured size, which keeps a bulk backlog's
 * fetches short for urgent ones.
 */
export function fetchBytesPerPartition(configuredBytes: number, largestRequestBytes: number | undefined, topicMaxMessageBytes: number): number {
  if (largestRequestBytes === undefined) return configuredBytes;
  return Math.max(configuredBytes, Math.min(largestRequestBytes, topicMaxMessageBytes) + RECORD_SLACK_BYTES);
}

/** Whether fetchBytesPerPartition may raise the configured size (only then is a topic's config worth a round trip). */
export function mayRaise(configuredBytes: number, largestRequestBytes: number | undefined): boolean {
  return largestRequestBytes !== undefined && largestRequestBytes + RECORD_SLACK_BYTES > configuredBytes;
}

/**
 * Each topic's max.message.bytes, as the brokers report it (DescribeConfigs); a topic whose config
 * the answer does not give is left out. Rejects as DescribeConfigs does (e.g. refused by ACLs).
 */
export async function topicMaxMessageBytes(admin: Admin, topics: readonly string[]): Promise<Map<string, number>> {
  const found = new Map<string, number>();
  const { resources } = await admin.describeConfigs({
    includeSynonyms: false,
    resources: topics.map((name) => ({ type: TOPIC_RESOURCE, name, configNames: ['max.message.bytes'] })),
  });
  for (const r of resources) {
    const bytes = Number(r.configEntries.find((e) => e.configName === 'max.message.bytes')?.configValue);
    if (r.errorCode === 0 && Number.isInteger(bytes) && bytes > 0) found.set(r.resourceName, bytes);
  }
  return found;
}

/** The largest max.message.bytes of the topics: no request on them is larger. The broker default when unreadable. */
export async function largestMessageBytes(admin: Admin, topics: readonly string[]): Promise<number> {
  try {
    const largest = Math.max(0, ...(await topicMaxMessageBytes(admin, topics)).values());
    return largest > 0 ? largest : BROKER_DEFAULT_MAX_MESSAGE_BYTES;
  } catch {
    // DescribeConfigs refused (ACLs): what an unconfigured topic takes.
    return BROKER_DEFAULT_MAX_MESSAGE_BYTES;
  }
}
