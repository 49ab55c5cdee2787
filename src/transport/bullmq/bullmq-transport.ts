import { Queue, WaitingError, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { BullmqSettings } from '../../contracts/fleet-config.ts';
import type { FleetError } from '../../errors/fleet-error.ts';
import { closedError, DeliveryLedger } from '../delivery-ledger.ts';
import { renderName } from '../names.ts';
import { predecessorNote, predecessorWorkers } from './lost-job-reclaimer.ts';
import { QueueCache } from './queue-cache.ts';
import { ErrorThrottle } from '../error-throttle.ts';
import { settlesWithin } from '../with-timeout.ts';
import { SuspectStore } from './suspect-store.ts';
import { QueueSweeper } from './queue-sweeper.ts';
import { ReplyQueues } from './reply-queues.ts';
import { answerJobs, stalledOutAnswer } from './answer-jobs.ts';
import { StallReaper } from './stall-reaper.ts';
import { JobSettler } from './job-settler.ts';
import { HeldJob } from './held-job.ts';
import { putBack } from './put-back.ts';
import { ModelWorker, type FetchTuning } from './model-worker.ts';
import { DeliveryBatcher } from './delivery-batcher.ts';
import { ANSWER_BOUND_MAX_MS, RedisAnswerWatch } from './redis-answer-watch.ts';
import { StreamFrameMarks } from './stream-frame-marks.ts';
import type { AnsweredFrame, Delivery, FrameClaim, Outcome, Transport, TransportStartOptions } from '../transport.ts';
import { bullmqError, ensureRedisAnswers, fromBullmqPriority, KEEP_COMPLETED, redisConnection } from './bullmq-names.ts';

export interface BullmqTransportOptions extends FetchTuning {
  /** How often a worker looks for jobs BullMQ failed after maxStalledCount stalls, to answer them (stall-reaper.ts). */
  readonly reaperIntervalMs?: number;
}

/** How long dropping the connections waits for a sweep in flight (it may wait for Redis forever). */
const STOP_WAIT_MS = 1_000;

/**
 * BullMQ transport: one queue per model with native priority. Each fetched job's processor
 * returns a promise that settle() resolves with the result, so BullMQ itself keeps the lock
 * renewed while the job waits locally, completes the job with the result as its return value,
 * and re-runs it elsewhere if this worker dies (stalled-job check). Chosen over manual
 * getNextJob/moveToCompleted because lock renewal, stall recovery and fetch-next-on-complete stay
 * BullMQ's well-tested code paths rather than ours. Each model's fetching is a ModelWorker; the
 * held jobs are answered by JobSettler. JS thread only.
 */
export class BullmqTransport implements Transport {
  readonly kind = 'bullmq' as const;
  private readonly ledger = new DeliveryLedger<HeldJob>();
  private readonly workers = new Map<string, ModelWorker>();
  /**
   * One for all reply and DLQ queues: they share one connection, and with Redis away its every
   * reconnect attempt is an error on each of them, for as long as the outage lasts.
   */
  private readonly outQueueErrors = new ErrorThrottle();
  private readonly outQueues = new QueueCache<Queue>((name) => {
    const q = new Queue(name, { connection: this.shared, prefix: this.settings.prefix });
    q.on('error', (err) => {
      const { log, heldBack } = this.outQueueErrors.note(Date.now());
      if (log) this.options.logger?.warn({ err, queue: name, heldBack }, 'bullmq queue error');
    });
    return q;
  });
  private connection: Redis | undefined;
  private onDeliveries: ((d: Delivery[]) => void) | undefined;
  private onFatal: ((err: FleetError) => void) | undefined;
  private onAnswered: ((model: string, dlqReason: string) => void) | undefined;
  private readonly deliveries: DeliveryBatcher;
  private stopped = false;
  private closed = false;
  private sweeper: QueueSweeper | undefined;
  private reaper: StallReaper | undefined;
  private readonly suspects = new SuspectStore(
    () => this.shared,
    (queue) => `${this.settings.prefix}:${queue}:npu-fleet-suspects`,
  );
  private readonly settler: JobSettler;
  private readonly replyQueues: ReplyQueues;
  private readonly frameMarks: StreamFrameMarks;
  /** Whether Redis answers at all: a frozen server keeps its connections 'ready' (redis-answer-watch.ts). */
  private readonly answers: RedisAnswerWatch;

  constructor(
    private readonly settings: BullmqSettings,
    private readonly options: BullmqTransportOptions = {},
  ) {
    const ownKey = (model: string, name: string): string => `${settings.prefix}:${renderName(settings.queueTemplate, model)}:${name}`;
    this.replyQueues = new ReplyQueues({
      redis: () => this.shared,
      prefix: settings.prefix,
      registryKey: (model) => ownKey(model, 'npu-fleet-reply-queues'),
      claimKey: (model) => ownKey(model, 'npu-fleet-reply-sweep'),
      defaultQueue: (model) => renderName(settings.repliesTemplate, model),
      ttlMs: settings.replyTtlMs,
      keepCompletedMs: KEEP_COMPLETED.age * 1_000,
      clean: (queue, graceMs, limit, state) => this.cleanJobs(queue, graceMs, limit, state),
      logger: options.logger,
    });
    // Closed, a claim still waiting (or a release) must not open the connection again: it fails, and its frames go out unchecked.
    this.frameMarks = new StreamFrameMarks({
      redis: () => (this.closed ? Promise.reject(closedError(this.kind)) : Promise.resolve(this.shared)),
      key: (model, streamKey, kind) => ownKey(model, `npu-fleet-frame-${kind}:${streamKey}`),
      logger: options.logger,
    });
    this.deliveries = new DeliveryBatcher((batch) => this.onDeliveries?.(batch), options.logger);
    this.answers = new RedisAnswerWatch({
      redis: () => (this.closed ? undefined : this.connection),
      unansweredMs: Math.min(settings.connectTimeoutMs, ANSWER_BOUND_MAX_MS),
      logger: options.logger,
    });
    this.settler = new JobSettler({
      settings,
      ledger: this.ledger,
      outQueues: this.outQueues,
      workers: this.workers,
      suspects: this.suspects,
      replyQueues: this.replyQueues,
      redis: () => this.shared,
      logger: options.logger,
    });
  }

  private get shared(): Redis {
    this.connection ??= redisConnection(this.settings);
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
        const mw = new ModelWorker({
          model,
          queue,
          priorityLevels,
          settings: this.settings,
          tuning: this.options,
          shared: () => this.shared,
          processor: (job, token) => this.process(model, job, token),
          intakeOff: () => this.stopped || this.closed,
          holds: (jobId) => this.ledger.has(`${queue}/${jobId}`),
        });
        this.workers.set(model, mw);
        await mw.worker.waitUntilReady();
        const before = predecessors.get(queue);
        if (before !== undefined) await mw.reclaim(before);
        void mw.worker.run().catch((err: unknown) => {
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
        (queue, graceMs, limit) => this.cleanJobs(queue, graceMs, limit, 'wait'),
        this.options.logger,
        (intervalMs) => this.replyQueues.sweep([...this.workers.keys()], intervalMs),
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
        also: () => this.sweepSuspects(),
      });
      this.reaper.start();
      this.answers.start();
    } catch (err) {
      throw bullmqError(err, 'starting the bullmq transport failed');
    }
  }

  /** The suspect counts of jobs finished or gone without them being forgotten (SuspectStore.sweep). */
  private async sweepSuspects(): Promise<void> {
    for (const { queue } of this.workers.values()) {
      try {
        await this.suspects.sweep(queue, (jobId) => `${this.settings.prefix}:${queue}:${jobId}`);
      } catch (err) {
        this.options.logger?.warn({ err, queue }, 'could not sweep the device-hang counts of finished jobs; the next sweep tries again');
      }
    }
  }

  /** Removes up to `limit` jobs of `queue` in `state` older than `graceMs`. */
  private async cleanJobs(queue: string, graceMs: number, limit: number, state: 'wait' | 'completed'): Promise<number> {
    try {
      return (await this.outQueues.acquire(queue).clean(graceMs, limit, state)).length;
    } finally {
      this.outQueues.release(queue);
    }
  }

  private async reachRedis(): Promise<void> {
    try {
      await ensureRedisAnswers(this.shared, this.settings, this.settings.connectTimeoutMs);
    } catch (err) {
      this.connection?.disconnect();
      this.connection = undefined;
      throw err;
    }
  }

  /** The processor: hands the job to the runtime and resolves when settle() (or release) says so. */
  private async process(model: string, job: Job, token: string | undefined): Promise<unknown> {
    const mw = this.workers.get(model);
    const held = mw === undefined ? undefined : this.ledger.get(`${mw.queue}/${job.id}`);
    if (held !== undefined) {
      // Held here already, its lock lapsed meanwhile (see HeldJob): the runtime has it, so it is
      // not delivered again; this fetch takes over.
      this.options.logger?.warn({ queue: mw?.queue, jobId: job.id }, 'a job held here came back after its lock lapsed (Redis away longer than lockDurationMs?); kept, not delivered twice');
      return new Promise<unknown>((resolve, reject) => held.adopt({ job, token: token ?? '', resolve, reject }));
    }
    const priority = fromBullmqPriority(job.priority);
    if (this.stopped || this.closed || mw === undefined || (priority !== undefined && mw.paused.has(priority))) {
      // Fetched although intake is off for it (a fetch was in flight, or only some priorities are
      // paused and this is the best job left): put it back at its place in its priority, rest.
      await this.moveBack(job, token ?? '');
      this.suspects.noteBounce(job.id ?? '');
      if (mw !== undefined && !this.stopped && !this.closed) await mw.rest();
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
        await this.moveBack(job, token ?? '');
        throw new WaitingError();
      }
      suspectCount = count;
    }
    return new Promise<unknown>((resolve, reject) => {
      this.ledger.add(deliveryId, new HeldJob(model, { job, token: token ?? '', resolve, reject }, mw.worker.completions, this.moveBack));
      const data: unknown = job.data;
      const body =
        data !== null && typeof data === 'object' && !Array.isArray(data)
          ? (data as Record<string, unknown>)
          : Buffer.from(typeof data === 'string' ? data : JSON.stringify(data) ?? '', 'utf8');
      this.deliveries.add({
        deliveryId,
        model,
        priority,
        body,
        receivedAt: Date.now(),
        redelivered,
        suspectCount,
      });
    });
  }

  /** Not BullMQ's moveToWait: a job goes back to its place in its priority (put-back.ts). */
  private readonly moveBack = (job: Job, token: string): Promise<void> => putBack(this.shared, this.settings.prefix, job, token);

  pause(model: string, priorities: readonly number[]): void {
    this.workers.get(model)?.pause(priorities);
  }

  resume(model: string, priorities: readonly number[]): void {
    this.workers.get(model)?.resume(priorities);
  }

  settle(outcomes: readonly Outcome[]): Promise<void> {
    if (this.closed) return Promise.reject(closedError(this.kind));
    return this.ledger.guard(
      outcomes.map((o) => o.delivery.deliveryId),
      () => this.settler.settle(outcomes),
    );
  }

  /** A camera's frames are fetched by every worker of its model: see StreamFrameMarks. */
  claimNewestFrames(frames: readonly AnsweredFrame[]): Promise<FrameClaim> {
    return this.frameMarks.claim(frames);
  }

  release(deliveries: readonly Delivery[]): Promise<void> {
    return this.settler.release(deliveries);
  }

  /** See JobSettler.markSuspect. */
  markSuspect(deliveries: readonly Delivery[]): Promise<boolean> {
    return this.settler.markSuspect(deliveries);
  }

  async stopIntake(): Promise<void> {
    this.stopped = true;
    await Promise.all([...this.workers.values()].map((mw) => mw.reconcile()));
  }

  /**
   * A job BullMQ failed because its workers died holding it too often (see StallReaper): its
   * `failed` result and a DLQ record, published like any settle's.
   */
  private async answerStalledOut(model: string, job: Job): Promise<void> {
    const answer = stalledOutAnswer(model, job);
    const outs = answerJobs(this.settings, answer);
    await this.replyQueues.note(model, outs.filter((o) => o.job.name === 'result').map((o) => o.queue));
    for (const { queue, job: out } of outs) {
      try {
        await this.outQueues.acquire(queue).add(out.name, out.data, out.opts);
      } finally {
        this.outQueues.release(queue);
      }
    }
    // Answered for good: a count it had (a crash-looping input) must not pass to a replay of the same job id.
    this.suspects.forget(job.queueName, job.id ?? '');
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
    for (const mw of this.workers.values()) mw.clearTimers();
    await Promise.allSettled([...this.workers.values()].map((mw) => mw.worker.close()));
    await this.disconnect();
  }

  connected(): boolean {
    if (this.closed || this.workers.size === 0 || this.connection?.status !== 'ready') return false;
    for (const mw of this.workers.values()) if (mw.connection.status !== 'ready') return false;
    return this.answers.unansweredForMs() === undefined;
  }

  unreadyReason(): string | undefined {
    if (this.closed || this.workers.size === 0 || this.connection?.status !== 'ready') return undefined;
    const waitedMs = this.answers.unansweredForMs();
    if (waitedMs === undefined) return undefined;
    const boundMs = Math.min(this.settings.connectTimeoutMs, ANSWER_BOUND_MAX_MS);
    return (
      `Redis has not answered for ${waitedMs} ms (a command unanswered past ${boundMs} ms: transport.bullmq.connectTimeoutMs, at most ${ANSWER_BOUND_MAX_MS}; ` +
      'a frozen or overloaded redis-server?); ready again once it answers'
    );
  }

  /** Simulates a crash: connections dropped, locks left to expire; other workers re-run the jobs. */
  async abort(): Promise<void> {
    this.closed = true;
    // A sweep in flight may wait for an absent Redis forever; a crash does not wait for it.
    await settlesWithin(this.reaper?.stop(), STOP_WAIT_MS);
    for (const [id] of this.ledger.entries()) this.ledger.forget(id);
    for (const mw of this.workers.values()) mw.clearTimers();
    await Promise.all([...this.workers.values()].map((mw) => this.forceClose(mw)));
    await this.disconnect();
  }

  /**
   * BullMQ's close(true) hands back a close already begun: after close() gave up on a graceful
   * worker close waiting for an absent Redis, the force close waited for Redis too, for good.
   * Past the bound its lock renewal stops and its blocking connection is dropped here (BullMQ's
   * own disconnect() drops it only once the main one has ended, which one reconnecting to an
   * absent Redis never does; the main one is mw.connection, dropped in disconnect()).
   */
  private async forceClose(mw: ModelWorker): Promise<void> {
    if (await settlesWithin(mw.worker.close(true), STOP_WAIT_MS)) return;
    mw.worker.stopLockRenewal();
    void mw.worker.backend.blockingClient?.then(
      (client) => client.disconnect(),
      () => undefined,
    );
  }

  private async disconnect(): Promise<void> {
    this.answers.stop();
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
