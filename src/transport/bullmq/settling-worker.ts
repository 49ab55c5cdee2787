import { Worker, type Job, type JobJson } from 'bullmq';
import { noteFetched } from './put-back.ts';

type CompletionListener = (error: Error | undefined) => void;

/**
 * A Worker that reports when moveToCompleted has really happened (or failed) for a fetch, tells
 * of each job it fetches, and stays sound where BullMQ's Worker is not: job data that is not JSON,
 * and a job fetched again while an earlier fetch of it is still being processed here.
 */
export class SettlingWorker extends Worker {
  /** By lock token: one per fetch, where a job id may be fetched again before its earlier fetch ends. */
  readonly completions = new Map<string, CompletionListener>();
  /** Told of every job fetched, before BullMQ fetches the next one (ModelWorker rests on a paused priority). */
  onFetched: ((job: Job) => void) | undefined;
  /** Job id -> the token and fetch time of its latest fetch being processed here. */
  private readonly latestFetch = new Map<string, { token: string; fetchedAt: number | undefined }>();

  protected override async handleCompleted(
    result: unknown,
    job: Job,
    token: string,
    fetchNextCallback?: () => boolean,
    span?: unknown,
  ): Promise<Job> {
    const listener = this.completions.get(token);
    this.completions.delete(token);
    try {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any -- span type is internal to bullmq
      const next = await super.handleCompleted(result, job, token, fetchNextCallback, span as any);
      listener?.(undefined);
      return next;
    } catch (err) {
      listener?.(err as Error);
      throw err;
    }
  }

  /**
   * Why: BullMQ parses job data as JSON while fetching; data some other writer left that is not
   * JSON throws there, before any processor runs, so the job sat active until its lock lapsed,
   * again at every fetch, and after maxStalledCount stalls failed as a stalled-out job (answered
   * WORKER_CRASHED). Kept as text instead, the job reaches the transport and is answered invalid.
   */
  protected override createJob(data: JobJson, jobId: string): Job {
    try {
      return super.createJob(data, jobId);
    } catch (err) {
      if (!(err instanceof SyntaxError)) throw err;
      return super.createJob({ ...data, data: JSON.stringify(data.data) }, jobId);
    }
  }

  protected override async nextJobFromJobData(jobData?: JobJson, jobId?: string, token?: string): Promise<Job> {
    const job = await super.nextJobFromJobData(jobData, jobId, token);
    if (job !== undefined) {
      noteFetched(job);
      this.onFetched?.(job);
    }
    return job;
  }

  /**
   * Why: BullMQ renews locks by job id. When a job whose lock lapsed while held here (Redis away
   * past the lock) comes back to this worker, its new fetch is tracked under the same id, and the
   * earlier fetch, ending afterwards, untracks it: the new lock would lapse in turn and the job
   * stall again. The newest fetch is tracked again once an older one ends.
   */
  override async processJob(job: Job, token: string, fetchNextCallback?: () => boolean): Promise<void | Job> {
    const id = job.id;
    if (id !== undefined) this.latestFetch.set(id, { token, fetchedAt: job.processedOn });
    try {
      return await super.processJob(job, token, fetchNextCallback);
    } finally {
      const latest = id === undefined ? undefined : this.latestFetch.get(id);
      if (latest?.token === token) this.latestFetch.delete(id as string);
      else if (latest !== undefined) this.lockManager.trackJob(id as string, latest.token, latest.fetchedAt ?? Date.now());
    }
  }

  /**
   * For a close given up on (Redis away): BullMQ stops renewing the locks of what it fetched only
   * once its close completes, and until then that timer alone kept a process alive for good.
   */
  stopLockRenewal(): void {
    void this.lockManager.close();
  }
}
