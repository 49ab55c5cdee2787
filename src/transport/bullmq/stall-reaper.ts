import type { Job, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { TransportLogger } from '../kafka/kafka-client.ts';
import { PeriodicSweep } from './periodic-sweep.ts';

/** BullMQ's failedReason for a job whose worker died holding it more than maxStalledCount times. */
export const STALLED_OUT = 'job stalled more than allowable limit';
/** Failed jobs read per round trip, and pages per queue and sweep (a backlog drains over a few sweeps). */
const PAGE = 100;
const MAX_PAGES = 10;
/** How long one worker's claim to answer a job holds (another answers it if this one died). */
const CLAIM_MS = 10 * 60_000;

export interface ReaperTarget {
  readonly model: string;
  /** The model's request queue. */
  readonly queue: Queue;
}

export interface StallReaperOptions {
  readonly targets: readonly ReaperTarget[];
  readonly redis: () => Redis;
  /** Redis key of the claim to answer one job. */
  readonly claimKey: (queue: string, jobId: string) => string;
  /** Publishes the job's `failed` result and DLQ record. */
  readonly answer: (model: string, job: Job) => Promise<void>;
  readonly intervalMs: number;
  readonly logger?: TransportLogger | undefined;
  /** Run after each sweep, over the same queues (the transport's suspect counts of jobs gone). */
  readonly also?: () => Promise<unknown>;
}

/**
 * Why: BullMQ fails a job for good once its worker died holding it more than maxStalledCount
 * times (a process crash, OOM kill or segfault each time: a crash-looping input, or crashes while
 * the job sat prefetched), and nothing tells the requester: the job just lands in the failed set.
 * The fleet never fails a job itself (every outcome completes it with its result), so each job in
 * the failed set with that reason is one of these. The reaper answers it: a `failed` result
 * (WORKER_CRASHED) to its replyTo and a DLQ record with the original, so every request still gets
 * exactly one result and can be replayed once the cause is fixed; then it removes the failed job.
 * Every worker runs one; a Redis SET NX per job makes one of them answer. JS thread; one sweep at
 * a time.
 */
export class StallReaper {
  private readonly periodic = new PeriodicSweep(() => this.sweepAll());

  constructor(private readonly o: StallReaperOptions) {}

  start(): void {
    this.periodic.start(this.o.intervalMs, true);
  }

  stop(): Promise<void> {
    return this.periodic.stop().then(() => undefined);
  }

  /** One pass over every target; resolves to how many jobs this worker answered. */
  sweep(): Promise<number> {
    return this.periodic.sweep();
  }

  private async sweepAll(): Promise<number> {
    let answered = 0;
    for (const { model, queue } of this.o.targets) {
      try {
        // Past failed jobs of other reasons (an operator's, BullMQ's own), a bounded number of pages a sweep.
        for (let page = 0; page < MAX_PAGES; page++) {
          const jobs = await queue.getJobs(['failed'], page * PAGE, (page + 1) * PAGE - 1, true);
          for (const job of jobs) if (await this.reap(model, queue, job)) answered++;
          if (jobs.length < PAGE) break;
        }
      } catch (err) {
        this.o.logger?.warn({ err, queue: queue.name }, 'could not answer jobs BullMQ failed after their workers died; the next sweep tries again');
      }
    }
    if (answered > 0) this.o.logger?.warn({ answered }, 'answered jobs whose workers died holding them too often (WORKER_CRASHED results and DLQ records)');
    await this.o.also?.();
    return answered;
  }

  /** Answers one stalled-out job if this worker wins its claim; true when it did. */
  private async reap(model: string, queue: Queue, job: Job): Promise<boolean> {
    if (job.failedReason !== STALLED_OUT || job.id === undefined) return false;
    const key = this.o.claimKey(queue.name, job.id);
    if ((await this.o.redis().set(key, '1', 'PX', CLAIM_MS, 'NX')) !== 'OK') return false;
    try {
      await this.o.answer(model, job);
    } catch (err) {
      // Not answered: let the next sweep (of any worker) try again.
      await this.o.redis().del(key).catch(() => 0);
      throw err;
    }
    // Answered: the claim stays, so a failed removal is retried by a later sweep after CLAIM_MS
    // at the worst (a second answer then), never at once.
    await job.remove();
    return true;
  }
}
