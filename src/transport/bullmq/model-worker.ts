import { Queue, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { BullmqSettings } from '../../contracts/fleet-config.ts';
import type { TransportLogger } from '../kafka/kafka-client.ts';
import { fromBullmqPriority, redisConnection } from './bullmq-names.ts';
import { ErrorThrottle } from '../error-throttle.ts';
import { isRedisRefusal } from './redis-refusal.ts';
import { reclaimLostJobs, RECLAIM_DELAY_MS } from './lost-job-reclaimer.ts';
import { placeStalled } from './put-back.ts';
import { SettlingWorker } from './settling-worker.ts';

/** After Redis refuses a fetch (out of memory, a read-only replica), how long fetching rests. */
const FETCH_BACKOFF_MS = 1_000;

/** The transport options (BullmqTransportOptions) a model's fetching reads. */
export interface FetchTuning {
  readonly logger?: TransportLogger;
  /** Jobs held locally per model (BullMQ worker concurrency): the local backlog bound. */
  readonly prefetch?: number;
  /** How often a worker looks for jobs whose lock expired (crashed workers). */
  readonly stalledIntervalMs?: number;
  /** Stalls (worker crashes while holding the job) before BullMQ fails a job for good. */
  readonly maxStalledCount?: number;
  /** While only some priorities are paused, how long fetching rests after meeting a paused one. */
  readonly pausedPollMs?: number;
}

export interface ModelWorkerOptions {
  readonly model: string;
  readonly queue: string;
  readonly priorityLevels: number;
  readonly settings: BullmqSettings;
  readonly tuning: FetchTuning;
  /** The transport's shared connection (the counter Queue, lock reads). */
  readonly shared: () => Redis;
  /** The transport's processor for this model's jobs. */
  readonly processor: (job: Job, token: string | undefined) => Promise<unknown>;
  /** Whether the transport's intake is off (stopped or closed): fetching stays paused, nothing is reclaimed. */
  readonly intakeOff: () => boolean;
  /** Whether the transport holds the job (its ledger). */
  readonly holds: (jobId: string) => boolean;
}

/**
 * One model's fetching: a BullMQ worker on its own connection, a Queue on the shared one for
 * counts and active jobs, the paused priorities and rests that pace fetching, and putting back
 * the jobs a lost connection cut off. JS thread only.
 */
export class ModelWorker {
  readonly model: string;
  readonly queue: string;
  readonly worker: SettlingWorker;
  /** The worker's own connection: BullMQ leaves a connection it was given open on close. */
  readonly connection: Redis;
  readonly counter: Queue;
  readonly paused = new Set<number>();
  private readonly priorityLevels: number;
  private restUntil = 0;
  private restTimer: NodeJS.Timeout | undefined;
  private reclaimTimer: NodeJS.Timeout | undefined;
  private readonly errors = new ErrorThrottle();
  private readonly queueErrors = new ErrorThrottle();

  constructor(private readonly o: ModelWorkerOptions) {
    const { settings, tuning, queue } = o;
    this.model = o.model;
    this.queue = queue;
    this.priorityLevels = o.priorityLevels;
    // Named, so an operator (and a test) can tell this worker's connections in CLIENT LIST.
    this.connection = redisConnection(settings, { connectionName: `npu-fleet:${settings.prefix}:${queue}`.replace(/[^\w:.-]/g, '_') });
    this.worker = new SettlingWorker(queue, o.processor, {
      connection: this.connection,
      prefix: settings.prefix,
      concurrency: tuning.prefetch ?? settings.prefetch,
      lockDuration: settings.lockDurationMs,
      stalledInterval: tuning.stalledIntervalMs ?? Math.min(30_000, settings.lockDurationMs),
      maxStalledCount: tuning.maxStalledCount ?? 5,
      autorun: false,
    });
    this.counter = new Queue(queue, { connection: o.shared(), prefix: settings.prefix });
    // Without a listener BullMQ prints connection errors with console.error. Throttled like the
    // worker's: with Redis away the shared connection's every reconnect attempt is an error here,
    // per model, for as long as the outage lasts.
    this.counter.on('error', (err) => {
      const { log, heldBack } = this.queueErrors.note(Date.now());
      if (log) tuning.logger?.warn({ err, queue, heldBack }, 'bullmq queue error');
    });
    this.worker.on('error', (err) => this.onError(err));
    // BullMQ fetches up to `prefetch` jobs in a row before processing the first, so the processor
    // alone met a paused priority only after a whole window was fetched, to be put back job by
    // job: with large free windows thousands of fetches and put-backs a second, each carrying the
    // job's data. Resting on the first one met stops the run there.
    this.worker.onFetched = (job) => {
      const priority = fromBullmqPriority(job.priority);
      if (priority !== undefined && this.paused.has(priority) && !this.o.intakeOff()) void this.rest();
    };
    // Told by this worker's stalled check of each job it put on the wait list: see placeStalled.
    this.worker.on('stalled', (jobId: string) => {
      placeStalled(o.shared(), settings.prefix, queue, jobId).catch((err: unknown) =>
        tuning.logger?.warn({ err, queue, jobId }, 'could not move a stalled job to its place in its priority; it is served next'),
      );
    });
        // Every 'ready' after the first is a reconnect: a fetch may have been cut off with the
    // old connection (see reclaimLostJobs).
    let readies = 0;
    this.connection.on('ready', () => {
      if (++readies === 1 || this.reclaimTimer !== undefined) return;
      this.reclaimTimer = setTimeout(() => {
        this.reclaimTimer = undefined;
        void this.reclaim();
      }, RECLAIM_DELAY_MS);
    });
  }

  /**
   * Puts back the active jobs locked with `workerId`'s tokens that this worker does not hold: its
   * own after a reconnect (a fetch the lost connection cut off), or, at start, those of the dead
   * previous worker process of this device. Either would otherwise wait until its lock lapses:
   * minutes of lockDurationMs, since a lock must outlast the longest local wait.
   */
  async reclaim(workerId = this.worker.id): Promise<void> {
    if (this.o.intakeOff()) return;
    const predecessor = workerId !== this.worker.id;
    try {
      await reclaimLostJobs({
        queue: this.counter,
        redis: this.o.shared(),
        prefix: this.o.settings.prefix,
        queueName: this.queue,
        workerId,
        holds: this.o.holds,
        logger: this.o.tuning.logger,
        ...(predecessor ? { what: 'the jobs the dead previous worker of this device held' } : {}),
      });
    } catch (err) {
      const what = predecessor ? "the dead previous worker's jobs" : 'jobs cut off by the reconnect';
      this.o.tuning.logger?.warn({ err, queue: this.queue }, `could not put back ${what}; they come back when their locks lapse`);
    }
  }

  /**
   * BullMQ answers a fetch Redis refused (not a connection error: out of memory, a read-only
   * replica after a failover) by fetching again at once: thousands of failed scripts and error
   * events a second for as long as it lasts. Fetching rests a while instead, and the log is
   * throttled.
   */
  private onError(err: Error): void {
    const { log, heldBack } = this.errors.note(Date.now());
    if (log) this.o.tuning.logger?.warn({ err, queue: this.queue, heldBack }, 'bullmq worker error');
    if (isRedisRefusal(err) && !this.o.intakeOff()) void this.rest(FETCH_BACKOFF_MS);
  }

  /** Fetching rests for `ms` (default pausedPollMs: the next fetch would only find the same paused priority). */
  async rest(ms = this.o.tuning.pausedPollMs ?? 200): Promise<void> {
    this.restUntil = Math.max(this.restUntil, Date.now() + ms);
    this.armRestTimer();
    await this.reconcile();
  }

  private armRestTimer(): void {
    if (this.restTimer !== undefined) return;
    this.restTimer = setTimeout(() => {
      this.restTimer = undefined;
      // A longer rest asked for meanwhile: wait for its end.
      if (this.restUntil > Date.now()) this.armRestTimer();
      void this.reconcile();
    }, Math.max(1, this.restUntil - Date.now()));
  }

  /** Pauses or resumes the BullMQ worker as intake, the paused priorities and rests say. */
  async reconcile(): Promise<void> {
    const allPaused = this.priorityLevels > 0 && [...Array(this.priorityLevels).keys()].every((p) => this.paused.has(p));
    const wantPaused = this.o.intakeOff() || allPaused || this.restUntil > Date.now();
    try {
      if (wantPaused && !this.worker.isPaused()) await this.worker.pause(true);
      else if (!wantPaused && this.worker.isPaused()) await this.worker.resume();
    } catch (err) {
      this.o.tuning.logger?.warn({ err, queue: this.queue }, 'bullmq pause/resume failed');
    }
  }

  pause(priorities: readonly number[]): void {
    for (const p of priorities) this.paused.add(p);
    void this.reconcile();
  }

  resume(priorities: readonly number[]): void {
    for (const p of priorities) this.paused.delete(p);
    this.restUntil = 0;
    void this.reconcile();
  }

  /** Closing: no rest or reclaim may fire after the connections are gone. */
  clearTimers(): void {
    clearTimeout(this.restTimer);
    clearTimeout(this.reclaimTimer);
  }
}
