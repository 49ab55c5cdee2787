import type { Redis } from 'ioredis';

/** Suspect counts outlive a worker restart by far, and an abandoned count does not live forever. */
const SUSPECTS_TTL_S = 7 * 24 * 3600;

/**
 * Device-hang suspects of BullMQ jobs (Transport.markSuspect): per request queue, a hash beside
 * BullMQ's own keys from job id to the times the job was on a device that hung. Read only for
 * redelivered jobs, so the common path pays nothing.
 */
export class SuspectStore {
  constructor(
    private readonly redis: () => Redis,
    /** The hash key of a request queue (its BullMQ key prefix + a name BullMQ does not use). */
    private readonly keyOf: (queue: string) => string,
  ) {}

  async countOf(queue: string, jobId: string): Promise<number> {
    return Number((await this.redis().hget(this.keyOf(queue), jobId)) ?? 0) || 0;
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
