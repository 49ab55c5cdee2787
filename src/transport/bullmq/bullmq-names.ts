import { FleetError } from '../../errors/fleet-error.ts';

// The connection code moved to redis-connection.ts; these names stay importable from here.
export { ensureRedisAnswers, hideCredentials, redisConnection, redisHost, redisWhere, type RedisTarget } from './redis-connection.ts';

/**
 * BullMQ priority: 0 means "no priority" (a separate FIFO list served BEFORE every prioritized
 * job), 1 is the most urgent prioritized value. Request priority p therefore maps to p + 1, so
 * every request is prioritized and FIFO holds within a priority.
 */
export function toBullmqPriority(priority: number): number {
  return priority + 1;
}

export function fromBullmqPriority(jobPriority: number | undefined): number | undefined {
  return jobPriority !== undefined && jobPriority > 0 ? jobPriority - 1 : undefined;
}

/**
 * `jobId = id` whenever BullMQ accepts it. BullMQ refuses ids that are integers ("42") or contain
 * ':'; those (and ids starting with '~', to keep the mapping one-to-one) become '~' + base64url.
 */
export function jobIdFor(requestId: string): string {
  const integer = `${Number.parseInt(requestId, 10)}` === requestId;
  if (!integer && !requestId.includes(':') && !requestId.startsWith('~')) return requestId;
  return `~${Buffer.from(requestId, 'utf8').toString('base64url')}`;
}


export function bullmqError(err: unknown, what: string): FleetError {
  if (err instanceof FleetError) return err;
  return new FleetError('TRANSPORT_ERROR', `${what}: ${(err as Error)?.message ?? String(err)}`, { cause: err });
}

/** Job retention: results and DLQ records are read once; keep them a while for inspection. */
export const KEEP_COMPLETED = { age: 3_600, count: 10_000 } as const;
export const KEEP_FAILED = { age: 24 * 3_600 } as const;
