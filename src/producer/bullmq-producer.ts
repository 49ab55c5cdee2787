import { Queue, type Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { requestToJson } from '../codec/index.ts';
import type { BullmqSettings } from '../contracts/fleet-config.ts';
import { DEFAULT_LIMITS, type CodecLimits } from '../contracts/limits.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import {
  bullmqError,
  ensureRedisAnswers,
  jobIdFor,
  KEEP_COMPLETED,
  KEEP_FAILED,
  redisConnection,
  redisWhere,
  toBullmqPriority,
} from '../transport/bullmq/bullmq-names.ts';
import { isCommandTimeout } from '../transport/bullmq/redis-connection.ts';
import { ErrorThrottle } from '../transport/error-throttle.ts';
import type { TransportLogger } from '../transport/kafka/kafka-client.ts';
import { renderName } from '../transport/names.ts';
import { withTimeout } from '../transport/with-timeout.ts';
import type {
  Producer,
  ProducerOptions,
  PublishOptions,
  RawMessage,
  ReplySubscription,
  RequestOptions,
  SubscribeOptions,
} from './producer.ts';
import { ReplyWorkers } from './bullmq-reply-workers.ts';
import { ADD_TOKEN_OPTION, EarlierJobs } from './earlier-jobs.ts';
import { INPUT_DIGEST_OPTION, inputDigest } from './input-digest.ts';
import { OutageWatch } from './outage-watch.ts';
import { privateInbox } from './private-inbox.ts';
import { refuseAll, ReplyRouter } from './reply-router.ts';
import { checkReplyName, checkRequests } from './request-check.ts';
import { refuseUnservedModels, unservedRefusal } from './served-models.ts';

export interface BullmqProducerOptions extends ProducerOptions {
  readonly logger?: TransportLogger;
  /** Reply workers' concurrency (Redis round trips in flight; results are handed over in queue order whatever it is). */
  readonly replyConcurrency?: number;
}

/**
 * BullMQ producer client: a job per request on the model's queue, `jobId = id` (BullMQ ignores a
 * second add with the same id while the first is retained: publishing is idempotent), priority
 * p → p + 1, data = the JSON envelope. Replies are jobs on the reply queue; a reply queue is a
 * work queue, so two subscribers of one queue split its replies between them.
 */
export class BullmqProducer implements Producer {
  readonly kind = 'bullmq' as const;
  readonly inbox: string;
  /** Why request() cannot use the inbox (a clientId the transport cannot name it with). */
  private readonly inboxRefusal: FleetError | undefined;
  private readonly router: ReplyRouter;
  private readonly earlier: EarlierJobs;
  private readonly queues = new Map<string, Queue>();
  /** One for all the queues: with Redis away each attempt to reconnect is an error on every one. */
  private readonly queueErrors = new ErrorThrottle();
  private readonly replyWorkers: ReplyWorkers;
  private connection: Redis | undefined;
  private reachable: Promise<void> | undefined;
  /** Publishes waiting on `connection` while Redis is away (whileReachable). */
  private outage: OutageWatch | undefined;
  private inboxReady: Promise<void> | undefined;
  /** The inbox queue exists on Redis (its worker started): close() removes it. */
  private inboxOpened = false;
  /** Awaited adds so far: numbers each add's token (ADD_TOKEN_OPTION), unique with the inbox name. */
  private awaitedAdds = 0;
  private readonly defaultPriority: number;
  private readonly limits: CodecLimits;
  private closed = false;
  /** close() has begun: no new reply worker may start (it would outlive close). */
  private closing: Promise<void> | undefined;

  constructor(
    private readonly settings: BullmqSettings,
    private readonly options: BullmqProducerOptions = {},
  ) {
    this.defaultPriority = options.defaultPriority ?? 0;
    this.limits = options.limits ?? DEFAULT_LIMITS;
    this.router = new ReplyRouter((model) => {
      const queue = renderName(settings.queueTemplate, model);
      return `that a worker reads queue ${queue} under prefix ${settings.prefix}: new Queue('${queue}', { prefix: '${settings.prefix}' }).getWorkers(), or redis-cli CLIENT LIST (BullMQ names a worker's connections ${settings.prefix}:<base64 of the queue name>)`;
    });
    const inbox = privateInbox('bullmq', options.clientId ?? 'producer');
    this.inbox = inbox.name;
    this.inboxRefusal = inbox.refusal;
    this.replyWorkers = new ReplyWorkers({
      settings,
      limits: this.limits,
      logger: options.logger,
      concurrency: options.replyConcurrency,
      isClosed: () => this.closed,
    });
    this.earlier = new EarlierJobs({
      redis: () => {
        if (this.connection === undefined) throw new FleetError('CLOSED', 'bullmq producer is closed');
        return this.connection;
      },
      jobKey: (r) => `${settings.prefix}:${renderName(settings.queueTemplate, r.model)}:${jobIdFor(r.id)}`,
      router: this.router,
      limits: this.limits,
    });
  }

  private queue(name: string): Queue {
    // From the start of close(), not its end: a publish slipping in while close() waits for the
    // reply workers would be sent, its waiter registered after close() failed them all (a
    // TIMEOUT later instead of CLOSED), and its reply would re-create the removed inbox queue.
    if (this.closing !== undefined) throw new FleetError('CLOSED', 'bullmq producer is closed');
    return this.openQueue(name);
  }

  private openQueue(name: string): Queue {
    let q = this.queues.get(name);
    if (q === undefined) {
      q = new Queue(name, { connection: this.ownConnection(), prefix: this.settings.prefix });
      q.on('error', (err) => {
        const { log, heldBack } = this.queueErrors.note(Date.now());
        if (log) this.options.logger?.warn({ err, queue: name, heldBack }, 'bullmq queue error');
      });
      this.queues.set(name, q);
    }
    return q;
  }

  /**
   * The connection of the queues, reach() and EarlierJobs. Each command on it fails after
   * connectTimeoutMs without an answer (ioredis commandTimeout): a Redis that took the connection
   * and then stopped answering (SIGSTOP, a hung host or VM) sends no 'close', so OutageWatch never
   * armed and a publish waited for good. Only this connection: the reply workers' own connections
   * block on fetches by design (a request's timeoutMs bounds those), and the fleet workers'
   * connections keep waiting (a settlement given up half way could lose a job's result).
   */
  private ownConnection(): Redis {
    if (this.connection === undefined) {
      this.connection = redisConnection(this.settings, { commandTimeout: this.settings.connectTimeoutMs });
      // Reconnect attempts while Redis is away; without a listener ioredis prints each one.
      this.connection.on('error', (err: Error) => this.options.logger?.debug({ err }, 'redis connection error'));
    }
    return this.connection;
  }

  /** A failed command of ownConnection() as the FleetError to throw: Redis not answering names the setting. */
  private redisFailure(err: unknown, what: string): FleetError {
    return isCommandTimeout(err) ? this.unanswered(what, err) : bullmqError(err, what);
  }

  /**
   * Redis gave no answer within connectTimeoutMs: down (OutageWatch), or connected and silent
   * (commandTimeout). One wording for both, since the operator's checks are the same.
   */
  private unanswered(what: string, cause?: unknown): FleetError {
    const timeoutMs = this.settings.connectTimeoutMs;
    const how = this.connection?.status === 'ready' ? 'the connection is open but nothing answers (redis-server stopped, hung or overloaded)' : 'the connection is down';
    return new FleetError(
      'TRANSPORT_ERROR',
      `${what}: ${redisWhere(this.settings)} did not answer within ${timeoutMs} ms (transport.bullmq.connectTimeoutMs): ${how}; ` +
        `check ${this.settings.sentinel === undefined ? 'transport.bullmq.redisUrl' : 'transport.bullmq.sentinel'} and that redis-server is up and answering from here, ` +
        'or raise transport.bullmq.connectTimeoutMs for a Redis that is slow for a while. ' +
        'Publishing the same requests again is safe (an add of a request id already added is a no-op)',
      { cause, retriable: true },
    );
  }

  /**
   * Once per connection: fails with the setting to check when Redis does not answer, where
   * BullMQ (connections retry every command forever) would leave a publish hanging.
   */
  private reach(): Promise<void> {
    if (this.closing !== undefined) return Promise.reject(new FleetError('CLOSED', 'bullmq producer is closed'));
    if (this.reachable === undefined) {
      const connection = this.ownConnection();
      this.reachable = ensureRedisAnswers(connection, this.settings, this.settings.connectTimeoutMs, 'bullmq producer').catch(
        (err: unknown) => {
          // The next call asks again; the connection keeps reconnecting meanwhile.
          this.reachable = undefined;
          throw err;
        },
      );
    }
    return this.reachable;
  }

  private async addByModel(jobs: ReadonlyArray<{ model: string; name: string; data: unknown; opts: Record<string, unknown> }>): Promise<void> {
    const byQueue = new Map<string, Array<{ name: string; data: unknown; opts: Record<string, unknown> }>>();
    for (const { model, ...job } of jobs) {
      const name = renderName(this.settings.queueTemplate, model);
      const list = byQueue.get(name) ?? [];
      list.push(job);
      byQueue.set(name, list);
    }
    await this.reach();
    try {
      await this.whileReachable(Promise.all([...byQueue].map(([name, list]) => this.queue(name).addBulk(list))));
    } catch (err) {
      throw this.redisFailure(err, 'publishing requests failed');
    }
  }

  /**
   * `work`, or a failure naming Redis once the connection has been down for connectTimeoutMs
   * while it waits. reach() checks Redis once per connection; a Redis lost after that (a restart,
   * a failover) left every command queued on a connection that retries forever: a publish, and
   * `npu-fleet publish` with it, waited for Redis for good. The commands stay queued: if Redis
   * comes back before close(), they are still sent (an add of a request id already added is a
   * no-op, so publishing again is safe).
   */
  private async whileReachable<T>(work: Promise<T>): Promise<T> {
    const connection = this.connection;
    if (connection === undefined) return await work;
    const timeoutMs = this.settings.connectTimeoutMs;
    this.outage ??= new OutageWatch(connection, timeoutMs, () => this.unanswered('publishing requests failed'));
    return await this.outage.race(work);
  }

  async publish(requests: RequestEnvelope | readonly RequestEnvelope[], options: PublishOptions = {}): Promise<void> {
    const list = Array.isArray(requests) ? requests : [requests as RequestEnvelope];
    if (options.onDropped === undefined) {
      await this.add(list);
      return;
    }
    // Tokened like an awaited add, so the jobs read back tell this add's from an earlier one's.
    const token = `${this.inbox}#${++this.awaitedAdds}`;
    await this.add(list, token);
    const dropped = await this.earlier.dropped(list, token);
    if (dropped.length > 0) options.onDropped(dropped);
  }

  /** `token`: stored in the jobs' options, telling this add's jobs from earlier ones of the same id (EarlierJobs). */
  private async add(list: readonly RequestEnvelope[], token?: string, digests: readonly string[] = list.map(inputDigest)): Promise<void> {
    checkRequests(list, 'bullmq', this.limits);
    refuseUnservedModels(list, this.options.models);
    await this.addByModel(
      list.map((r, i) => ({
        model: r.model,
        name: 'request',
        data: requestToJson(r),
        opts: {
          jobId: jobIdFor(r.id),
          priority: toBullmqPriority(r.priority ?? this.defaultPriority),
          removeOnComplete: KEEP_COMPLETED,
          removeOnFail: KEEP_FAILED,
          // What the job asks, so a later request of its id can tell whether this job's answer is its own (EarlierJobs).
          [INPUT_DIGEST_OPTION]: digests[i],
          ...(token === undefined ? {} : { [ADD_TOKEN_OPTION]: token }),
        },
      })),
    );
  }

  /** request()/requestMany(): publish to the inbox, then take the answer of any earlier job of the same id (EarlierJobs). */
  private async addAwaited(list: readonly RequestEnvelope[], options: Pick<RequestOptions, 'rerunNotOk' | 'rerunAnswered' | 'onPublished'> = {}): Promise<void> {
    const { rerunNotOk = false, rerunAnswered = false, onPublished } = options;
    const digests = list.map(inputDigest);
    await this.earlier.clearAnswered(list, (r) => this.queue(renderName(this.settings.queueTemplate, r.model)), { notOk: rerunNotOk, answered: rerunAnswered }, digests);
    const token = `${this.inbox}#${++this.awaitedAdds}`;
    await this.add(
      list.map((r) => ({ ...r, replyTo: this.inbox })),
      token,
      digests,
    );
    // Redis has the jobs (an earlier job of the same id, answering instead, is looked up next).
    onPublished?.(list.length);
    await this.earlier.check(list, token, digests);
  }

  async publishRaw(messages: readonly RawMessage[]): Promise<void> {
    await this.addByModel(
      messages.map((m) => ({
        model: m.model,
        name: 'request',
        data: m.body instanceof Uint8Array ? Buffer.from(m.body.buffer, m.body.byteOffset, m.body.byteLength).toString('utf8') : m.body,
        opts: {
          ...(m.key === undefined ? {} : { jobId: jobIdFor(m.key) }),
          priority: toBullmqPriority(m.priority ?? this.defaultPriority),
          removeOnComplete: KEEP_COMPLETED,
          removeOnFail: KEEP_FAILED,
        },
      })),
    );
  }

  async request(request: RequestEnvelope, options: RequestOptions): Promise<ResultEnvelope> {
    if (this.inboxRefusal !== undefined) throw this.inboxRefusal;
    refuseUnservedModels([request], this.options.models);
    // Opened inside the round trip, so timeoutMs bounds it too: a Redis that took the connection
    // but stopped answering left the inbox worker waiting for it, and request() with it, forever.
    return this.router.roundTrip(request.id, options.timeoutMs, async () => {
      await this.openInbox();
      // Not sent once its wait has ended (timed out, closed) while the inbox opened.
      if (this.router.isWaiting(request.id)) await this.addAwaited([request], { rerunNotOk: options.rerunNotOk, rerunAnswered: options.rerunAnswered });
    }, options.timeoutMs, request.model);
  }

  requestMany(requests: readonly RequestEnvelope[], options: RequestOptions): Array<Promise<ResultEnvelope>> {
    const refusal = this.inboxRefusal;
    if (refusal !== undefined) return refuseAll(requests.length, refusal);
    const unserved = unservedRefusal(requests, this.options.models);
    if (unserved !== undefined) return refuseAll(requests.length, unserved);
    return this.router.roundTripMany(
      requests.map((r) => r.id),
      options.timeoutMs,
      async (waiting) => {
        await this.openInbox();
        const due = requests.filter((_, i) => waiting(i));
        if (due.length > 0) await this.addAwaited(due, options);
        else options.onPublished?.(0);
      },
      requests.map((r) => r.model),
    );
  }

  async prepare(): Promise<void> {
    if (this.inboxRefusal !== undefined) throw this.inboxRefusal;
    await this.openInbox();
  }

  /** The inbox's reply worker, started once. A failed start is not kept: once Redis answers again the next call opens it. */
  private openInbox(): Promise<void> {
    this.inboxReady ??= this.listen(this.inbox, (r) => this.router.deliver(r), undefined).then(
      () => void (this.inboxOpened = true),
      (err: unknown) => {
        this.inboxReady = undefined;
        throw err;
      },
    );
    return this.inboxReady;
  }

  async subscribeReplies(
    replyTo: string,
    onResult: (result: ResultEnvelope) => void,
    options: SubscribeOptions = {},
  ): Promise<ReplySubscription> {
    checkReplyName('bullmq', replyTo);
    const worker = await this.listen(replyTo, onResult, options.onError);
    return {
      close: async () => {
        await this.replyWorkers.close(worker);
      },
    };
  }

  /** A worker on a reply queue; jobs already waiting there are read too (a queue keeps them). */
  private async listen(queue: string, onResult: (r: ResultEnvelope) => void, onError: ((e: Error) => void) | undefined): Promise<Worker> {
    await this.reach();
    if (this.closing !== undefined) throw new FleetError('CLOSED', 'bullmq producer is closed');
    return this.replyWorkers.start(queue, onResult, onError);
  }

  close(): Promise<void> {
    this.closing ??= this.closeNow();
    return this.closing;
  }

  /**
   * Bounded by about one connectTimeoutMs in all: a shutdown hook (SIGTERM, a 30 s grace) waited
   * 2 x connectTimeoutMs with Redis away, the reply workers and then the inbox removal each waiting
   * the whole bound. Broker work that Redis is not up for is skipped and logged instead.
   */
  private async closeNow(): Promise<void> {
    const deadline = Date.now() + this.settings.connectTimeoutMs;
    this.router.failAll(new FleetError('CLOSED', 'producer closed before the reply arrived'));
    this.earlier.close();
    await this.replyWorkers.closeAll(deadline - Date.now());
    if (this.inboxOpened) await this.removeInbox(deadline);
    this.closed = true;
    await Promise.allSettled([...this.queues.values()].map((q) => q.close()));
    this.queues.clear();
    this.connection?.disconnect();
  }

  /** The inbox queue, removed from Redis by `deadline` (epoch ms), else left there with a warning naming it. */
  private async removeInbox(deadline: number): Promise<void> {
    const leftBehind = (why: string, err?: unknown): void =>
      this.options.logger?.warn(
        { err, queue: this.inbox, prefix: this.settings.prefix },
        `left the inbox queue ${this.inbox} on ${redisWhere(this.settings)} (${why}); remove it with Queue.obliterate({ force: true }) (the workers' sweep removes it only if a worker answered on it, replyTtlMs after the last answer)`,
      );
    const status = this.connection?.status;
    if (status !== 'ready') {
      // A command now would only wait for Redis: nothing to gain from spending the bound on it.
      leftBehind(`the connection is ${status ?? 'gone'}, not ready`);
      return;
    }
    const remainingMs = deadline - Date.now();
    if (remainingMs <= 0) {
      leftBehind('closing the reply workers took the whole of transport.bullmq.connectTimeoutMs');
      return;
    }
    await withTimeout(this.openQueue(this.inbox).obliterate({ force: true }), remainingMs, 'removing the inbox queue').catch((err: unknown) => leftBehind('it did not go', err));
  }
}
