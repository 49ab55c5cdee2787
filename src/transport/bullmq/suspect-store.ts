import type { Redis } from 'ioredis';
import { withTimeout } from '../with-timeout.ts';

/** Suspect counts outlive a worker restart by far, and an abandoned count does not live forever. */
const SUSPECTS_TTL_S = 7 * 24 * 3600;
const MAX_BOUNCES_TRACKED = 10_000;

/**
 * Device-hang suspects of BullMQ jobs (Transport.markSuspect): per request queue, a hash beside
 * BullMQ's own keys from job id to the times the job was on a device that hung. Read only for
 * redelivered jobs, so the common path pays nothing.
 */
export class SuspectStore {
  /** Job id -> times this worker put it back unprocessed (a paused priority): bounded. */
  private readonly bounced = new Map<string, number>();

  constructor(
    private readonly redis: () => Redis,
    /** The hash key of a request queue (its BullMQ key prefix + a name BullMQ does not use). */
    private readonly keyOf: (queue: string) => string,
    private readonly readTimeoutMs = 2_000,
  ) {}

  async countOf(queue: string, jobId: string): Promise<number> {
    return Number((await this.redis().hget(this.keyOf(queue), jobId)) ?? 0) || 0;
  }

  /** This worker put the job back unprocessed: its next start is no sign of a hang. */
  noteBounce(jobId: string): void {
    this.bounced.set(jobId, (this.bounced.get(jobId) ?? 0) + 1);
    if (this.bounced.size > MAX_BOUNCES_TRACKED) this.bounced.delete(this.bounced.keys().next().value as string);
  }

  /**
   * The count for a job just fetched. Only a job started before can have been on a device that
   * hung, so one read for those, unless every earlier start was this worker putting it back.
   * Bounded: a stalled Redis must not hold the job outside the transport's ledger, where close()
   * cannot see it; a failed or slow read counts as 0 (the job runs as unsuspected).
   */
  countForFetched(queue: string, job: { id?: string | undefined; attemptsStarted: number; stalledCounter: number }): Promise<{ count: number; error?: unknown }> | undefined {
    const jobId = job.id ?? '';
    const ownBounces = this.bounced.size === 0 ? 0 : (this.bounced.get(jobId) ?? 0);
    if (ownBounces > 0) this.bounced.delete(jobId);
    // undefined: nothing to read (no promise, no await on the common path).
    if (job.stalledCounter === 0 && job.attemptsStarted - 1 <= ownBounces) return undefined;
    return this.readBounded(queue, jobId);
  }

  private async readBounded(queue: string, jobId: string): Promise<{ count: number; error?: unknown }> {
    try {
      return { count: await withTimeout(this.countOf(queue, jobId), this.readTimeoutMs, 'reading the suspect count') };
    } catch (error) {
      return { count: 0, error };
    }
  }

  /** One more hang for each job, in one round trip. */
  async mark(jobs: ReadonlyArray<{ queue: string; jobId: string }>): Promise<void> {
    if (jobs.length === 0) return;
    const multi = this.redis().multi();
    for (const { queue, jobId } of jobs) {
      const key = this.keyOf(queue);
      multi.hincrby(key, jobId, 1).expire(key, SUSPECTS_TTL_S);
    }
    await multi.exec();
  }

  /** The job was answered for good: its count is no longer needed. */
  forget(queue: string, jobId: string): void {
    void this.redis()
      .hdel(this.keyOf(queue), jobId)
      .catch(() => undefined);
  }
}
