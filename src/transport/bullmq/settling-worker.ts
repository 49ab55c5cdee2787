import { Worker, type Job } from 'bullmq';

type CompletionListener = (error: Error | undefined) => void;

/** A Worker that reports when moveToCompleted has really happened (or failed) for a job. */
export class SettlingWorker extends Worker {
  readonly completions = new Map<string, CompletionListener>();

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
}
