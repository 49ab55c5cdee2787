import { Redis, type RedisOptions } from 'ioredis';
import { FleetError } from '../../errors/fleet-error.ts';

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

/** A queue name BullMQ can hold (no ':', which separates its Redis key parts). */
export function isLegalQueueName(name: string): boolean {
  return name.length > 0 && name.length <= 249 && !name.includes(':');
}

/** One ioredis connection with the options BullMQ requires (retry forever on worker connections). */
export function redisConnection(redisUrl: string, extra: RedisOptions = {}): Redis {
  try {
    return new Redis(redisUrl, { maxRetriesPerRequest: null, enableReadyCheck: true, ...extra });
  } catch (err) {
    throw new FleetError('INVALID_CONFIG', `bullmq.redisUrl "${redisUrl}" is not a usable Redis URL: ${(err as Error).message}`, {
      cause: err,
    });
  }
}

export function bullmqError(err: unknown, what: string): FleetError {
  if (err instanceof FleetError) return err;
  return new FleetError('TRANSPORT_ERROR', `${what}: ${(err as Error)?.message ?? String(err)}`, { cause: err });
}

/** Job retention: results and DLQ records are read once; keep them a while for inspection. */
export const KEEP_COMPLETED = { age: 3_600, count: 10_000 } as const;
export const KEEP_FAILED = { age: 24 * 3_600 } as const;
