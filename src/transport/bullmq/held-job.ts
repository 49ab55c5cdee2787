import { WaitingError, type Job } from 'bullmq';

/** One fetch of a job: its lock token and the processor promise BullMQ awaits for it. */
export interface JobFetch {
  readonly job: Job;
  readonly token: string;
  /** Ends the processor: the worker then completes the job with this return value. */
  readonly resolve: (returnValue: unknown) => void;
  /** Ends the processor without completing the job. */
  readonly reject: (err: Error) => void;
}

type CompletionListener = (error: Error | undefined) => void;

/** Moves a job active under a token back to wait (put-back.ts: at its place in its priority). */
export type MoveBack = (job: Job, token: string) => Promise<void>;

/**
 * A fetched job the transport holds (its ledger entry) until it is settled or released.
 *
 * Why a fetch can be replaced: when the job's lock lapses while it is held here (Redis away for
 * longer than the lock, an event-loop stall), BullMQ's stalled check puts it back and this worker
 * may fetch it again. The runtime has it already, so the new fetch is not delivered a second time:
 * it takes over (adopt), and the earlier processor ends without touching Redis, where it no longer
 * holds the lock; otherwise it would never end and hold a fetch slot for good. complete and
 * moveBack act on the fetch current when they finish. JS thread only.
 */
export class HeldJob {
  private fetch: JobFetch;

  constructor(
    readonly model: string,
    first: JobFetch,
    /** The worker's moveToCompleted outcomes by lock token (SettlingWorker.completions). */
    private readonly completions: Map<string, CompletionListener>,
    private readonly moveToWait: MoveBack,
  ) {
    this.fetch = first;
  }

  get job(): Job {
    return this.fetch.job;
  }

  get token(): string {
    return this.fetch.token;
  }

  /** The job came back to this worker while held: the new fetch replaces the earlier one. */
  adopt(next: JobFetch): void {
    const earlier = this.fetch;
    this.fetch = next;
    // A no-op when the earlier processor already ended (a completion under way fails on its lock).
    earlier.reject(new WaitingError());
  }

  /** Completes the job with `returnValue`; resolves once BullMQ has moved it to completed. */
  async complete(returnValue: unknown): Promise<void> {
    for (;;) {
      const f = this.fetch;
      try {
        await new Promise<void>((done, fail) => {
          this.completions.set(f.token, (err) => (err === undefined ? done() : fail(err)));
          f.resolve(returnValue);
        });
        return;
      } catch (err) {
        // Adopted meanwhile: the earlier fetch's lock was gone; complete the new one.
        if (this.fetch === f) throw err;
      }
    }
  }

  /** Moves the job back to wait and ends its processor; throws when Redis refused (the lock is gone). */
  async moveBack(): Promise<void> {
    for (;;) {
      const f = this.fetch;
      let failure: unknown;
      try {
        await this.moveToWait(f.job, f.token);
      } catch (err) {
        failure = err;
      }
      f.reject(new WaitingError());
      if (this.fetch === f) {
        if (failure !== undefined) throw failure;
        return;
      }
    }
  }
}
