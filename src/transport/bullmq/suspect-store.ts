import type { Redis } from 'ioredis';
import { withTimeout } from '../with-timeout.ts';

/** Suspect counts outlive a worker restart by far, and an abandoned count does not live forever. */
const SUSPECTS_TTL_S = 7 * 24 * 3600;
const MAX_BOUNCES_TRACKED = 10_000;
/** Entries looked at per round trip, and round trips per queue and sweep (a big hash is swept over a few). */
const SWEEP_PAGE = 500;
const SWEEP_PAGES = 20;

/**
 * For each job id in ARGV whose job hash (KEYS[i + 1]) is gone or finished, removes its count
 * from KEYS[1]; resolves to how many. Atomic, so a job cannot be re-added or marked between the
 * look and the removal.
 */
const SWEEP_FINISHED = `
local removed = 0
for i = 1, #ARGV do
  local job = KEYS[i + 1]
  if redis.call('EXISTS', job) == 0 or redis.call('HEXISTS', job, 'finishedOn') == 1 then
    removed = removed + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return removed
`;

/**
 * Device-hang suspects of BullMQ jobs (Transport.markSuspect): per request queue, a hash beside
 * BullMQ's own keys from job id to the times the job was on a device that hung. Read only for
 * redelivered jobs, so the common path pays nothing. A count is dropped when its job is answered
 * with it (forget) and by a periodic sweep once its job is finished or gone by any other way (a
 * count never read because the read failed, a job BullMQ failed after its workers died, one its
 * producer removed): the hash's own TTL starts again with every mark, so in a fleet with a hang
 * a week such entries would otherwise stay for good, and one left for a removed job would count
 * against a later job of the same id (a DLQ replay, a producer's rerun).
 */
export class SuspectStore {
  /** Job id -> times this worker put it back unprocessed (a paused priority): bounded. */
  private readonly bounced = new Map<string, number>();
  /** Per queue, where the last sweep's scan of the hash stopped ('0': the start). */
  private readonly sweepCursors = new Map<string, string>();

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

  /**
   * Removes the counts of `queue`'s jobs that are finished or gone (`jobKeyOf`: a job id's BullMQ
   * hash); resolves to how many. A job still waiting, delayed or active keeps its count, however
   * old: it may yet be quarantined by it. Bounded per call; a hash bigger than that is swept over
   * a few calls.
   */
  async sweep(queue: string, jobKeyOf: (jobId: string) => string): Promise<number> {
    const key = this.keyOf(queue);
    let cursor = this.sweepCursors.get(queue) ?? '0';
    let removed = 0;
    for (let page = 0; page < SWEEP_PAGES; page++) {
      const [next, flat] = await this.redis().hscan(key, cursor, 'COUNT', SWEEP_PAGE);
      const ids = flat.filter((_, i) => i % 2 === 0);
      if (ids.length > 0) removed += Number(await this.redis().eval(SWEEP_FINISHED, 1 + ids.length, key, ...ids.map(jobKeyOf), ...ids));
      cursor = next;
      if (cursor === '0') break;
    }
    this.sweepCursors.set(queue, cursor);
    return removed;
  }
}
