import { Worker, type Job, type JobJson } from 'bullmq';

type CompletionListener = (error: Error | undefined) => void;

/**
 * A Worker that reports when moveToCompleted has really happened (or failed) for a job, tells of
 * each job it fetches, and keeps a job whose data is not JSON as text.
 */
export class SettlingWorker extends Worker {
  readonly completions = new Map<string, CompletionListener>();
  /** Told of every job fetched, before BullMQ fetches the next one (ModelWorker rests on a paused priority). */
  onFetched: ((job: Job) => void) | undefined;

  protected override async handleCompleted(
    result: unknown,
    job: Job,
    token: string,
    fetchNextCallback?: () => boolean,
    span?: unknown,
  ): Promise<Job> {
    const listener = this.completions.get(job.id ?? '');
    this.completions.delete(job.id ?? '');
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
    if (job !== undefined) this.onFetched?.(job);
    return job;
  }
}
