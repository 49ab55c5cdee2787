import { Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { resultFromJson } from '../codec/index.ts';
import type { BullmqSettings } from '../contracts/fleet-config.ts';
import type { CodecLimits } from '../contracts/limits.ts';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { bullmqError, redisConnection } from '../transport/bullmq/bullmq-names.ts';
import { isRedisRefusal } from '../transport/bullmq/redis-refusal.ts';
import { ErrorThrottle } from '../transport/error-throttle.ts';
import type { TransportLogger } from '../transport/kafka/kafka-client.ts';
import { POP_GAP_MAX_MS, ReplyPopOrder } from './reply-pop-order.ts';

/** Lock and stalled-check period of reply-queue workers (see start). */
const REPLY_LOCK_MS = 5_000;
/** After Redis refuses a reply fetch, how long the reply worker rests. */
const REPLY_FETCH_BACKOFF_MS = 1_000;

export interface ReplyWorkersOptions {
  readonly settings: BullmqSettings;
  readonly limits: CodecLimits;
  readonly logger: TransportLogger | undefined;
  /**
   * Workers' concurrency: this bounds Redis round trips in flight (20,000 results: 5,800/s at 64,
   * 2,200/s at 1). Results are handed over in the order they were added to the queue all the same.
   */
  readonly concurrency: number | undefined;
  /** The producer is closed: a worker resting after a refused fetch stays paused. */
  readonly isClosed: () => boolean;
}

/** A BullmqProducer's workers on reply queues (its inbox, subscribeReplies), each with its own connection. */
export class ReplyWorkers {
  /** Reply workers and their own connections: BullMQ leaves a connection it was given open on close. */
  private readonly workers = new Map<Worker, Redis>();

  constructor(private readonly o: ReplyWorkersOptions) {}

  /** A worker on a reply queue; jobs already waiting there are read too (a queue keeps them). */
  async start(queue: string, onResult: (r: ResultEnvelope) => void, onError: ((e: Error) => void) | undefined): Promise<Worker> {
    const { settings, logger } = this.o;
    // Named, so an operator (and a test) can tell a client's reply connections in CLIENT LIST.
    const connection = redisConnection(settings, { connectionName: `npu-fleet-replies:${settings.prefix}:${queue}`.replace(/[^\w:.-]/g, '_') });
    // Reconnect attempts while Redis is away; without a listener ioredis prints each one.
    connection.on('error', (err: Error) => logger?.debug({ err, queue }, 'redis connection error'));
    // Results go to the caller in the order Redis popped them, which concurrency alone does not keep.
    const order = new ReplyPopOrder((count) => logger?.warn({ queue, count, waitedMs: POP_GAP_MAX_MS }, 'reply jobs popped off the queue did not reach the reply worker; the results after them are handed over without them'));
    order.watch(connection);
    const worker = new Worker(
      queue,
      async (job) => {
        let result: ResultEnvelope | undefined;
        let error: Error | undefined;
        try {
          result = resultFromJson(job.data, this.o.limits);
        } catch (err) {
          error = err as Error;
        }
        await order.handOver(job.id, () => {
          if (result !== undefined) onResult(result);
          else if (error !== undefined) onError?.(error);
        });
      },
      {
        connection,
        prefix: settings.prefix,
        concurrency: this.o.concurrency ?? 64,
        removeOnComplete: { count: 0 },
        // Handing a result to a callback takes no time, so short locks cost nothing and bound how
        // long a result waits when its fetch was lost (a Redis restart, a dropped connection):
        // BullMQ's 30 s lock and check kept such results active for 30-60 s. A result is never
        // failed for stalling a few times.
        lockDuration: REPLY_LOCK_MS,
        stalledInterval: REPLY_LOCK_MS,
        maxStalledCount: 100,
      },
    );
    // As on a fleet worker (ModelWorker.onError): a fetch Redis refuses is retried at
    // once by BullMQ, so fetching rests a second and the log is throttled.
    const errors = new ErrorThrottle();
    let resting = false;
    worker.on('error', (err) => {
      const { log, heldBack } = errors.note(Date.now());
      if (log) logger?.warn({ err, queue, heldBack }, 'bullmq reply worker error');
      if (!isRedisRefusal(err) || resting || this.o.isClosed()) return;
      resting = true;
      void worker
        .pause(true)
        .catch(() => undefined)
        .then(() => new Promise((r) => setTimeout(r, REPLY_FETCH_BACKOFF_MS).unref()))
        .then(() => {
          resting = false;
          if (!this.o.isClosed() && this.workers.has(worker)) worker.resume();
        });
    });
    this.workers.set(worker, connection);
    try {
      await worker.waitUntilReady();
    } catch (err) {
      throw bullmqError(err, `subscribing to replies on ${queue} failed`);
    }
    return worker;
  }

  /**
   * Closes `worker` within `boundMs` (default connectTimeoutMs). With Redis away, a graceful close
   * waits for it forever (BullMQ waits for the blocking connection to end, which a reconnecting
   * ioredis client never does): past the bound, or at once when the worker's connection is not up,
   * the connections are dropped and close goes on without waiting for them.
   */
  async close(worker: Worker, boundMs = this.o.settings.connectTimeoutMs): Promise<void> {
    const connection = this.workers.get(worker);
    this.workers.delete(worker);
    const closing = worker.close();
    let timer: NodeJS.Timeout | undefined;
    const waitMs = connection?.status === 'ready' ? Math.max(0, boundMs) : 0;
    const bound = new Promise<'late'>((r) => (timer = setTimeout(() => r('late'), waitMs)));
    try {
      if ((await Promise.race([closing, bound])) === 'late') {
        closing.catch(() => undefined);
        void worker.disconnect().catch(() => undefined);
        this.o.logger?.warn(
          { queue: worker.name, redisStatus: connection?.status, waitedMs: waitMs },
          'closed a reply worker without waiting for Redis: replies it had taken stay active on Redis until their lock lapses (5 s), then the next worker of the queue takes them',
        );
      }
    } finally {
      clearTimeout(timer);
      connection?.disconnect();
    }
  }

  /** Every worker started and not yet closed, all within `boundMs`. */
  async closeAll(boundMs?: number): Promise<void> {
    await Promise.allSettled([...this.workers.keys()].map((w) => this.close(w, boundMs)));
  }
}
