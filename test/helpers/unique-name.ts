// Per-test names for topics, groups and queues, so tests sharing one broker never see each other's data.
let counter = 0;

/**
 * `prefix` plus the worker pid, a time stamp, a counter and random bits. Only [a-z0-9._-], so the
 * result is a legal Kafka topic/group name and a BullMQ queue name (no ':').
 */
export function uniqueName(prefix: string): string {
  counter += 1;
  const safePrefix = prefix.replace(/[^a-zA-Z0-9._-]/g, '-').slice(0, 80);
  const random = Math.random().toString(36).slice(2, 8);
  return `${safePrefix}-${process.pid}-${Date.now().toString(36)}-${counter}-${random}`;
}
