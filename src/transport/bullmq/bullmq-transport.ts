import { Queue, WaitingError, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { resultToJson } from '../../codec/index.ts';
import type { BullmqSettings } from '../../contracts/fleet-config.ts';
import type { FleetError } from '../../errors/fleet-error.ts';
import { closedError, DeliveryLedger, notOpenError } from '../delivery-ledger.ts';
import type { TransportLogger } from '../kafka/kafka-client.ts';
import { renderName } from '../names.ts';
import { ErrorThrottle, isRedisRefusal } from './error-throttle.ts';
import { predecessorNote, predecessorWorkers, reclaimLostJobs, RECLAIM_DELAY_MS } from './lost-job-reclaimer.ts';
import { QueueCache } from './queue-cache.ts';
import { SettlingWorker } from './settling-worker.ts';
import { settlesWithin } from './settles-within.ts';
import { SuspectStore } from './suspect-store.ts';
import { QueueSweeper } from './queue-sweeper.ts';
import { answerJobs, stalledOutAnswer, type OutJob } from './answer-jobs.ts';
import { StallReaper } from './stall-reaper.ts';
import type { Delivery, Outcome, Transport, TransportStartOptions } from '../transport.ts';
import { bullmqError, ensureRedisAnswers, fromBullmqPriority, redisConnection } from './bullmq-names.ts';

export interface BullmqTransportOptions {
  readonly logger?: TransportLogger;
  /** Jobs held locally per model (BullMQ worker concurrency): the local backlog bound. */
  readonly prefetch?: number;
  /** How often a worker looks for jobs whose lock expired (crashed workers). */
  readonly stalledIntervalMs?: number;
  /** Stalls (worker crashes while holding the job) before BullMQ fails a job for good. */
  readonly maxStalledCount?: number;
  /** How often a worker looks for jobs BullMQ failed that way, to answer them (stall-reaper.ts). */
  readonly reaperIntervalMs?: number;
  /** While only some priorities are paused, how long fetching rests after meeting a paused one. */
  readonly pausedPollMs?: number;
}

interface Entry {
  readonly job: Job;
  readonly token: string;
  readonly model: string;
  /** Ends the processor: the worker then completes the job with this return value. */
  readonly complete: (returnValue: unknown) => Promise<void>;
  /** Ends the processor without completing (the job was moved back to wait). */
  readonly abandon: () => void;
}


interface ModelWorker {
  readonly model: string;
  readonly queue: string;
  readonly worker: SettlingWorker;
  /** The worker's own connection: BullMQ leaves a connection it was given open on close. */
  readonly connection: Redis;
  readonly counter: Queue;
  readonly paused: Set<number>;
  priorityLevels: number;
  restUntil: number;
  restTimer: NodeJS.Timeout | undefined;
  reclaimTimer: NodeJS.Timeout | undefined;
  readonly errors: ErrorThrottle;
}

/** After Redis refuses a fetch (out of memory, a read-only replica), how long fetching rests. */
const FETCH_BACKOFF_MS = 1_000;
/** How long dropping the connections waits for a sweep in flight (it may wait for Redis forever). */
const STOP_WAIT_MS = 1_000;

/**
 * BullMQ transport: one queue per model with native priority. Each fetched job's processor
 * returns a promise that settle() resolves with the result, so BullMQ itself keeps the lock
 * renewed while the job waits locally, completes the job with the result as its return value,
 * and re-runs it elsewhere if this worker dies (stalled-job check). Chosen over manual
 * getNextJob/moveToCompleted because lock renewal, stall recovery and fetch-next-on-complete stay
 * BullMQ's well-tested code paths rather than ours.
 */
export class BullmqTransport implements Transport {
  readonly kind = 'bullmq' as const;
  private readonly ledger = new DeliveryLedger<Entry>();
  private readonly workers = new Map<string, ModelWorker>();
  private readonly outQueues = new QueueCache<Queue>((name) => {
    const q = new Queue(name, { connection: this.shared, prefix: this.settings.prefix });
    q.on('error', (err) => this.options.logger?.warn({ err, queue: name }, 'bullmq queue error'));
    return q;
  });
  private connection: Redis | undefined;
  private onDeliveries: ((d: Delivery[]) => void) | undefined;
  private onFatal: ((err: FleetError) => void) | undefined;
  private onAnswered: ((model: string, dlqReason: string) => void) | undefined;
  private pending: Delivery[] = [];
  private flushScheduled = false;
  private stopped = false;
  private closed = false;
  private sweeper: QueueSweeper | undefined;
  private reaper: StallReaper | undefined;
  private readonly suspects = new SuspectStore(
    () => this.shared,
    (queue) => `${this.settings.prefix}:${queue}:npu-fleet-suspects`,
  );

  constructor(
    private readonly settings: BullmqSettings,
    private readonly options: BullmqTransportOptions = {},
  ) {}

  private get shared(): Redis {
    this.connection ??= redisConnection(this.settings.redisUrl);
    return this.connection;
  }

  async start(options: TransportStartOptions): Promise<void> {
    if (this.closed) throw closedError(this.kind);
    this.onDeliveries = options.onDeliveries;
    this.onFatal = options.onFatal;
    this.onAnswered = options.onAnswered;
    await this.reachRedis();
    const predecessors = predecessorWorkers(options.predecessor?.previous);
    try {
      for (const { model, priorityLevels } of options.subscriptions) {
        if (this.workers.has(model)) continue;
        const queue = renderName(this.settings.queueTemplate, model);
        // Named, so an operator (and a test) can tell this worker's connections in CLIENT LIST.
        const connection = redisConnection(this.settings.redisUrl, { connectionName: `npu-fleet:${this.settings.prefix}:${queue}`.replace(/[^\w:.-]/g, '_') });
        const worker = new SettlingWorker(queue, (job, token) => this.process(model, job, token), {
          connection,
          prefix: this.settings.prefix,
          concurrency: this.options.prefetch ?? this.settings.prefetch,
          lockDuration: this.settings.lockDurationMs,
          stalledInterval: this.options.stalledIntervalMs ?? Math.min(30_000, this.settings.lockDurationMs),
          maxStalledCount: this.options.maxStalledCount ?? 5,
          autorun: false,
        });
        const counter = new Queue(queue, { connection: this.shared, prefix: this.settings.prefix });
        // Without a listener BullMQ prints connection errors with console.error.
        counter.on('error', (err) => this.options.logger?.warn({ err, queue }, 'bullmq queue error'));
        const mw: ModelWorker = { model, queue, worker, connection, counter, paused: new Set(), priorityLevels, restUntil: 0, restTimer: undefined, reclaimTimer: undefined, errors: new ErrorThrottle() };
        worker.on('error', (err) => this.onWorkerError(mw, err));
        this.workers.set(model, mw);
        // Every 'ready' after the first is a reconnect: a fetch may have been cut off with the
        // old connection (see reclaimLostJobs).
        let readies = 0;
        connection.on('ready', () => {
          if (++readies === 1 || mw.reclaimTimer !== undefined) return;
          mw.reclaimTimer = setTimeout(() => {
            mw.reclaimTimer = undefined;
            void this.reclaim(mw);
          }, RECLAIM_DELAY_MS);
        });
        await worker.waitUntilReady();
        const before = predecessors.get(queue);
        if (before !== undefined) await this.reclaim(mw, before);
        void worker.run().catch((err: unknown) => {
          if (this.closed) return;
          // BullMQ retries Redis trouble inside its loop; a loop that ends means no more jobs.
          this.options.logger?.error({ err, queue }, 'bullmq worker stopped for good');
          this.onFatal?.(bullmqError(err, `the bullmq worker of queue ${queue} stopped`));
        });
      }
      options.predecessor?.save(predecessorNote([...this.workers.values()].map((w) => [w.queue, w.worker.id])));
      await this.sweeper?.stop();
      this.sweeper = new QueueSweeper(
        [...this.workers.keys()].flatMap((model) => [
          { queue: renderName(this.settings.repliesTemplate, model), ttlMs: this.settings.replyTtlMs },
          { queue: renderName(this.settings.dlqTemplate, model), ttlMs: this.settings.dlqTtlMs },
        ]),
        async (queue, graceMs, limit) => {
          try {
            return (await this.outQueues.acquire(queue).clean(graceMs, limit, 'wait')).length;
          } finally {
            this.outQueues.release(queue);
          }
        },
        this.options.logger,
      );
      this.sweeper.start();
      await this.reaper?.stop();
      this.reaper = new StallReaper({
        targets: [...this.workers.values()].map((mw) => ({ model: mw.model, queue: mw.counter })),
        redis: () => this.shared,
        claimKey: (queue, jobId) => `${this.settings.prefix}:${queue}:npu-fleet-answered:${jobId}`,
        answer: (model, job) => this.answerStalledOut(model, job),
        intervalMs: this.options.reaperIntervalMs ?? 10_000,
        logger: this.options.logger,
      });
      this.reaper.start();
    } catch (err) {
      throw bullmqError(err, 'starting the bullmq transport failed');
    }
  }

  private async reachRedis(): Promise<void> {
    try {
      await ensureRedisAnswers(this.shared, this.settings.redisUrl, this.settings.connectTimeoutMs);
    } catch (err) {
      this.connection?.disconnect();
      this.connection = undefined;
      throw err;
    }
  }

  /** The processor: hands the job to the runtime and resolves when settle() (or release) says so. */
  private async process(model: string, job: Job, token: string | undefined): Promise<unknown> {
    const mw = this.workers.get(model);
    const priority = fromBullmqPriority(job.priority);
    if (this.stopped || this.closed || mw === undefined || (priority !== undefined && mw.paused.has(priority))) {
      // Fetched although intake is off for it (a fetch was in flight, or only some priorities are
      // paused and this is the best job left): put it back at the head of its priority, rest.
      await job.moveToWait(token);
      this.suspects.noteBounce(job.id ?? '');
      if (mw !== undefined && !this.stopped && !this.closed) await this.rest(mw);
      throw new WaitingError();
    }
    const deliveryId = `${mw.queue}/${job.id}`;
    const redelivered = job.attemptsStarted > 1 || job.stalledCounter > 0;
    let suspectCount = 0;
    const read = this.suspects.countForFetched(mw.queue, job);
    if (read !== undefined) {
      const { count, error } = await read;
      if (error !== undefined) this.options.logger?.warn({ err: error, queue: mw.queue }, 'could not read device-hang suspects; delivering the job as unsuspected');
      if (this.stopped || this.closed) {
        // Intake stopped during the read: give the job back rather than hand it to a stopped runtime.
        await job.moveToWait(token);
        throw new WaitingError();
      }
      suspectCount = count;
    }
    return new Promise<unknown>((resolve, reject) => {
      this.ledger.add(deliveryId, {
        job,
        token: token ?? '',
        model,
        complete: (returnValue) =>
          new Promise<void>((done, fail) => {
            mw.worker.completions.set(job.id ?? '', (err) => (err === undefined ? done() : fail(err)));
            resolve(returnValue);
          }),
        abandon: () => reject(new WaitingError()),
      });
      const data: unknown = job.data;
      const body =
        data !== null && typeof data === 'object' && !Array.isArray(data)
          ? (data as Record<string, unknown>)
          : Buffer.from(typeof data === 'string' ? data : JSON.stringify(data) ?? '', 'utf8');
      this.pending.push({
        deliveryId,
        model,
        priority,
        body,
        receivedAt: Date.now(),
        redelivered,
        suspectCount,
      });
      this.scheduleFlush();
    });
  }

  /** Jobs arrive one by one; hand them over in batches on the next turn of the event loop. */
  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      const batch = this.pending;
      this.pending = [];
      if (batch.length === 0) return;
      try {
        this.onDeliveries?.(batch);
      } catch (err) {
        this.options.logger?.error({ err }, 'onDeliveries threw; its deliveries stay unacked until settled or released');
      }
    });
  }

  /**
   * Puts back the active jobs locked with `workerId`'s tokens that this worker does not hold: its
   * own after a reconnect (a fetch the lost connection cut off), or, at start, those of the dead
   * previous worker process of this device. Either would otherwise wait until its lock lapses:
   * minutes of lockDurationMs, since a lock must outlast the longest local wait.
   */
  private async reclaim(mw: ModelWorker, workerId = mw.worker.id): Promise<void> {
    if (this.closed || this.stopped) return;
    const predecessor = workerId !== mw.worker.id;
    try {
      await reclaimLostJobs({
        queue: mw.counter,
        redis: this.shared,
        prefix: this.settings.prefix,
        queueName: mw.queue,
        workerId,
        holds: (jobId) => this.ledger.has(`${mw.queue}/${jobId}`),
        logger: this.options.logger,
        ...(predecessor ? { what: 'the jobs the dead previous worker of this device held' } : {}),
      });
    } catch (err) {
      const what = predecessor ? "the dead previous worker's jobs" : 'jobs cut off by the reconnect';
      this.options.logger?.warn({ err, queue: mw.queue }, `could not put back ${what}; they come back when their locks lapse`);
    }
  }

  /**
   * BullMQ answers a fetch Redis refused (not a connection error: out of memory, a read-only
   * replica after a failover) by fetching again at once: thousands of failed scripts and error
   * events a second for as long as it lasts. Fetching rests a while instead, and the log is
   * throttled.
   */
  private onWorkerError(mw: ModelWorker, err: Error): void {
    const { log, heldBack } = mw.errors.note(Date.now());
    if (log) this.options.logger?.warn({ err, queue: mw.queue, heldBack }, 'bullmq worker error');
    if (isRedisRefusal(err) && !this.stopped && !this.closed) void this.rest(mw, FETCH_BACKOFF_MS);
  }

  /** Fetching rests for `ms` (default pausedPollMs: the next fetch would only find the same paused priority). */
  private async rest(mw: ModelWorker, ms = this.options.pausedPollMs ?? 200): Promise<void> {
    mw.restUntil = Math.max(mw.restUntil, Date.now() + ms);
    this.armRestTimer(mw);
    await this.reconcile(mw);
  }

  private armRestTimer(mw: ModelWorker): void {
    if (mw.restTimer !== undefined) return;
    mw.restTimer = setTimeout(() => {
      mw.restTimer = undefined;
      // A longer rest asked for meanwhile: wait for its end.
      if (mw.restUntil > Date.now()) this.armRestTimer(mw);
      void this.reconcile(mw);
    }, Math.max(1, mw.restUntil - Date.now()));
  }

  private async reconcile(mw: ModelWorker): Promise<void> {
    const allPaused = mw.priorityLevels > 0 && [...Array(mw.priorityLevels).keys()].every((p) => mw.paused.has(p));
    const wantPaused = this.stopped || this.closed || allPaused || mw.restUntil > Date.now();
    try {
      if (wantPaused && !mw.worker.isPaused()) await mw.worker.pause(true);
      else if (!wantPaused && mw.worker.isPaused()) await mw.worker.resume();
    } catch (err) {
      this.options.logger?.warn({ err, queue: mw.queue }, 'bullmq pause/resume failed');
    }
  }

  pause(model: string, priorities: readonly number[]): void {
    const mw = this.workers.get(model);
    if (mw === undefined) return;
    for (const p of priorities) mw.paused.add(p);
    void this.reconcile(mw);
  }

  resume(model: string, priorities: readonly number[]): void {
    const mw = this.workers.get(model);
    if (mw === undefined) return;
    for (const p of priorities) mw.paused.delete(p);
    mw.restUntil = 0;
    void this.reconcile(mw);
  }

  settle(outcomes: readonly Outcome[]): Promise<void> {
    if (this.closed) return Promise.reject(closedError(this.kind));
    return this.ledger.guard(
      outcomes.map((o) => o.delivery.deliveryId),
      () => this.settleNow(outcomes),
    );
  }

  private async settleNow(outcomes: readonly Outcome[]): Promise<void> {
    const { claimed, rejected } = this.ledger.claim(outcomes.map((o) => ({ deliveryId: o.delivery.deliveryId, outcome: o })));
    if (claimed.length > 0) {
      const byQueue = new Map<string, OutJob[]>();
      const returnValues = new Map<string, unknown>();
      for (const { item, entry } of claimed) {
        const { outcome } = item;
        const json = resultToJson(outcome.result);
        returnValues.set(item.deliveryId, json);
        const source = { queue: entry.job.queueName, jobId: entry.job.id, data: entry.job.data, priority: outcome.delivery.priority, createdAt: entry.job.timestamp };
        for (const { queue, job } of answerJobs(this.settings, { model: entry.model, result: outcome.result, json, replyTo: outcome.replyTo, dlq: outcome.dlq, source })) {
          const list = byQueue.get(queue) ?? [];
          list.push(job);
          byQueue.set(queue, list);
        }
      }
      try {
        await Promise.all([...byQueue].map(([queue, jobs]) => this.outQueues.acquire(queue).addBulk(jobs)));
      } catch (err) {
        for (const { item } of claimed) this.ledger.unclaim(item.deliveryId);
        throw bullmqError(err, 'publishing results failed; the jobs stay active (unacked)');
      } finally {
        for (const queue of byQueue.keys()) this.outQueues.release(queue);
      }
      const completions = claimed.map(async ({ item, entry }) => {
        try {
          await entry.complete(returnValues.get(item.deliveryId));
        } finally {
          this.ledger.finish(item.deliveryId);
        }
      });
      const results = await Promise.allSettled(completions);
      // Answered for good: a suspect's count is no longer needed (rare, so one call each).
      for (const { item, entry } of claimed) {
        const mw = this.workers.get(entry.model);
        if ((item.outcome.delivery.suspectCount ?? 0) > 0 && mw !== undefined) this.suspects.forget(mw.queue, entry.job.id ?? '');
      }
      const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed !== undefined) {
        throw bullmqError(failed.reason, 'results are published but completing the job failed (lock lost?); it may be answered again');
      }
    }
    if (rejected.length > 0) throw notOpenError(rejected);
  }

  async release(deliveries: readonly Delivery[]): Promise<void> {
    const { claimed, rejected } = this.ledger.claim(deliveries);
    let failure: unknown;
    await Promise.all(
      claimed.map(async ({ item, entry }) => {
        try {
          await entry.job.moveToWait(entry.token);
        } catch (err) {
          // The lock is gone: the stalled check returns the job to wait anyway.
          failure ??= err;
        }
        entry.abandon();
        this.ledger.finish(item.deliveryId);
      }),
    );
    if (failure !== undefined) this.options.logger?.warn({ err: failure }, 'release: moving a job back to wait failed');
    if (rejected.length > 0) throw notOpenError(rejected);
  }

  /** Remembers (boundedly) that this worker put a job back unprocessed, so its next start is no sign of a hang. */
  async markSuspect(deliveries: readonly Delivery[]): Promise<boolean> {
    const jobs = deliveries.flatMap((d) => {
      const entry = this.ledger.get(d.deliveryId);
      const mw = entry === undefined ? undefined : this.workers.get(entry.model);
      return entry === undefined || mw === undefined ? [] : [{ queue: mw.queue, jobId: entry.job.id ?? '' }];
    });
    try {
      await this.suspects.mark(jobs);
    } catch (err) {
      throw bullmqError(err, 'recording device-hang suspects failed');
    }
    return jobs.length === deliveries.length;
  }

  async stopIntake(): Promise<void> {
    this.stopped = true;
    await Promise.all([...this.workers.values()].map((mw) => this.reconcile(mw)));
  }

  /**
   * A job BullMQ failed because its workers died holding it too often (see StallReaper): its
   * `failed` result and a DLQ record, published like any settle's.
   */
  private async answerStalledOut(model: string, job: Job): Promise<void> {
    const answer = stalledOutAnswer(model, job);
    for (const { queue, job: out } of answerJobs(this.settings, answer)) {
      try {
        await this.outQueues.acquire(queue).add(out.name, out.data, out.opts);
      } finally {
        this.outQueues.release(queue);
      }
    }
    if (answer.dlq !== undefined) this.onAnswered?.(model, answer.dlq.reason);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    // With Redis away each step below waits for it forever: commands queue on connections that
    // retry forever, and BullMQ's graceful worker close waits for its blocking connection to
    // end, which a reconnecting ioredis client never does. Past the bound, close as a crash
    // does: the jobs still held come back to the queue once their locks lapse.
    const graceful = this.closeGracefully();
    if (!(await settlesWithin(graceful, this.settings.connectTimeoutMs))) {
      graceful.catch(() => undefined);
      this.options.logger?.warn(
        { timeoutMs: this.settings.connectTimeoutMs },
        'closing the bullmq transport took over transport.bullmq.connectTimeoutMs (Redis away?); connections dropped, the jobs still held come back when their locks lapse',
      );
      await this.abort();
    }
  }

  private async closeGracefully(): Promise<void> {
    await this.reaper?.stop();
    await this.stopIntake();
    await this.ledger.quiesce();
    await this.release(this.ledger.idleEntries().map(([id]) => ({ deliveryId: id }) as Delivery)).catch(() => undefined);
    this.closed = true;
    for (const mw of this.workers.values()) {
      clearTimeout(mw.restTimer);
      clearTimeout(mw.reclaimTimer);
    }
    await Promise.allSettled([...this.workers.values()].map((mw) => mw.worker.close()));
    await this.disconnect();
  }

  /** Simulates a crash: connections dropped, locks left to expire; other workers re-run the jobs. */
  async abort(): Promise<void> {
    this.closed = true;
    // A sweep in flight may wait for an absent Redis forever; a crash does not wait for it.
    await settlesWithin(this.reaper?.stop(), STOP_WAIT_MS);
    for (const [id] of this.ledger.entries()) this.ledger.forget(id);
    for (const mw of this.workers.values()) {
      clearTimeout(mw.restTimer);
      clearTimeout(mw.reclaimTimer);
    }
    await Promise.allSettled([...this.workers.values()].map((mw) => mw.worker.close(true)));
    await this.disconnect();
  }

  private async disconnect(): Promise<void> {
    await settlesWithin(this.sweeper?.stop(), STOP_WAIT_MS);
    await Promise.allSettled([...this.workers.values()].map((mw) => mw.counter.close()));
    for (const mw of this.workers.values()) mw.connection.disconnect();
    await this.outQueues.closeAll();
    this.connection?.disconnect();
    this.connection = undefined;
  }

  async sourceLag(): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    try {
      for (const mw of this.workers.values()) {
        const counts = await mw.counter.getJobCounts('wait', 'prioritized');
        out[mw.model] = (counts['wait'] ?? 0) + (counts['prioritized'] ?? 0);
      }
    } catch (err) {
      throw bullmqError(err, 'reading the bullmq waiting count failed');
    }
    return out;
  }
}
