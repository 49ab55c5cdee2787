import type { Job, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { TransportLogger } from '../kafka/kafka-client.ts';
import { nextFetchSeq, putBack } from './put-back.ts';

/** After a reconnect, how long fetches still in flight get to reach the processor first. */
export const RECLAIM_DELAY_MS = 2_000;

export interface ReclaimTarget {
  /** A Queue on the worker's queue (reads its active jobs). */
  readonly queue: Queue;
  /** Any connection to the same Redis (reads lock keys). */
  readonly redis: Redis;
  readonly prefix: string;
  readonly queueName: string;
  /** The BullMQ Worker's id: its lock tokens are `${workerId}:${n}`. */
  readonly workerId: string;
  /** Whether this worker holds the job (the transport's ledger). */
  readonly holds: (jobId: string) => boolean;
  readonly logger?: TransportLogger | undefined;
  /** What the log line says of the jobs put back (default: cut off by a lost connection). */
  readonly what?: string;
}

/**
 * Jobs this worker's lock holds that the worker never received: Redis made them active, but the
 * reply carrying them was lost with the connection (a Redis restart or failover, a dropped
 * socket). BullMQ would give them back only once their lock lapses (lockDurationMs: minutes,
 * since it must outlast the longest local wait); this puts them back in the queue at once.
 * Returns how many it put back, each at its place in its priority (put-back.ts). Runs on the JS
 * thread after the worker's connection is ready again; a job moved or completed meanwhile makes
 * the put-back fail on the lock, and is skipped.
 */
export async function reclaimLostJobs(t: ReclaimTarget): Promise<number> {
  // Every worker's active jobs: the locks tell which are this worker's (one MGET for all).
  const active = (await t.queue.getActive()).filter((job): job is Job & { id: string } => job.id !== undefined && !t.holds(job.id));
  if (active.length === 0) return 0;
  const tokens = await t.redis.mget(active.map((job) => `${t.prefix}:${t.queueName}:${job.id}:lock`));
  // getActive lists the oldest fetch first; a cut-off fetch came after every one the processor
  // received, so numbered now, after theirs, they tie-break as they were fetched.
  const seqs = active.map(() => nextFetchSeq());
  let reclaimed = 0;
  for (const [i, job] of active.entries()) {
    const id = job.id;
    const token = tokens[i];
    if (token === null || token === undefined || !token.startsWith(`${t.workerId}:`)) continue;
    // Re-checked after the awaits: a fetch may have reached the processor meanwhile.
    if (t.holds(id)) continue;
    try {
      await putBack(t.redis, t.prefix, job, token, seqs[i]);
      reclaimed++;
    } catch (err) {
      t.logger?.debug({ err, queue: t.queueName, jobId: id }, 'lost job already moved on');
    }
  }
  if (reclaimed > 0) {
    t.logger?.warn({ queue: t.queueName, reclaimed }, `put back ${t.what ?? 'jobs whose fetch the lost connection cut off'} (they would have waited for their lock to lapse)`);
  }
  return reclaimed;
}

/** Queue → BullMQ worker id, from the note a previous worker process left (see BullmqTransport.start). */
export function predecessorWorkers(note: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  if (note === undefined) return out;
  try {
    const { workers } = JSON.parse(note) as { workers?: unknown };
    if (typeof workers !== 'object' || workers === null) return out;
    for (const [queue, id] of Object.entries(workers)) if (typeof id === 'string' && id !== '') out.set(queue, id);
  } catch {
    // Not a note this transport wrote: nothing to put back.
  }
  return out;
}

/** The note for the next worker process of this device: each queue's BullMQ worker id. */
export function predecessorNote(workers: ReadonlyArray<readonly [queue: string, workerId: string]>): string {
  return JSON.stringify({ workers: Object.fromEntries(workers) });
}
