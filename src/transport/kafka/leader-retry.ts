/**
 * Errors a broker answers while a partition's leadership settles: a topic created a moment ago
 * whose leader has not taken the partition up yet, or a leader that moved (a broker restarting).
 * kafkajs's admin gives up on the first NOT_LEADER_FOR_PARTITION of a ListOffsets, so a
 * `dlq list` right after a worker created the DLQ topic failed where a second try works.
 */
const LEADERSHIP_SETTLING = new Set([
  'NOT_LEADER_FOR_PARTITION',
  'LEADER_NOT_AVAILABLE',
  'REPLICA_NOT_AVAILABLE',
  'UNKNOWN_LEADER_EPOCH',
  'FENCED_LEADER_EPOCH',
  'OFFSET_NOT_AVAILABLE',
]);

/** The kafkajs protocol error `type` of `err` or of one of its causes, if any. */
function protocolType(err: unknown): string | undefined {
  for (let e = err, depth = 0; e !== null && typeof e === 'object' && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const type = (e as { type?: unknown }).type;
    if (typeof type === 'string') return type;
  }
  return undefined;
}

export function isLeadershipSettling(err: unknown): boolean {
  const type = protocolType(err);
  return type !== undefined && LEADERSHIP_SETTLING.has(type);
}

/**
 * Runs `attempt` again, with a doubling pause (25 ms up to 500 ms), while it fails because a
 * partition's leadership is settling, for at most `budgetMs`; any other failure, or the last one
 * past the budget, is thrown as it came.
 */
export async function whileLeadershipSettles<T>(attempt: () => Promise<T>, budgetMs = 10_000): Promise<T> {
  const deadline = Date.now() + budgetMs;
  for (let waitMs = 25; ; waitMs = Math.min(2 * waitMs, 500)) {
    try {
      return await attempt();
    } catch (err) {
      if (!isLeadershipSettling(err) || Date.now() + waitMs > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, waitMs));
    }
  }
}
