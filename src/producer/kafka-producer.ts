import { randomUUID } from 'node:crypto';
import type { Admin, Consumer, ISocketFactory, Kafka, Message } from 'kafkajs';
import { decodeResult, encodeRequest, type WireEncoding } from '../codec/index.ts';
import type { KafkaSettings } from '../contracts/fleet-config.ts';
import { DEFAULT_LIMITS, type CodecLimits } from '../contracts/limits.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { LostMemberRestarter } from '../transport/kafka/lost-member-watch.ts';
import { createKafka, ensureTopics, isUnknownTopic, kafkaError, startFailure, type TransportLogger } from '../transport/kafka/kafka-client.ts';
import { RotatingProducer } from '../transport/kafka/rotating-producer.ts';
import { StaleMemberRemover } from '../transport/kafka/stale-member-remover.ts';
import { CONTENT_TYPES, HEADERS, renderName, replyTopicPattern, type ReplyTopicPattern } from '../transport/names.ts';
import type {
  Producer,
  ProducerOptions,
  PublishOptions,
  RawMessage,
  ReplySubscription,
  RequestOptions,
  SubscribeOptions,
} from './producer.ts';
import { KafkaInbox } from './kafka-inbox.ts';
import { KafkaMessageSizes } from './kafka-message-sizes.ts';
import { refuseAll, ReplyRouter, timerMs } from './reply-router.ts';
import { checkReplyName, checkRequests } from './request-check.ts';
import { ProducerReplaced, SerialSends } from './serial-sends.ts';
import { refuseUnservedModels, unservedRefusal } from './served-models.ts';
import { refuseUnreadPriorities } from './unread-priorities.ts';

/** One message on its way, with what its topic was rendered from. */
interface Outgoing {
  readonly topic: string;
  readonly model: string;
  readonly priority: number;
  readonly message: Message;
  /** The request's id (publish; a raw message has none), named when its size is refused. */
  readonly id?: string;
}

interface ConsumerHandle {
  readonly consumer: Consumer;
  readonly groupId: string;
  /** A group this producer made up (deleted on close), not one the caller named. */
  readonly ownGroup: boolean;
  restarter?: LostMemberRestarter;
}

export interface KafkaProducerOptions extends ProducerOptions {
  readonly logger?: TransportLogger;
  /** Partitions of request topics created by this producer when missing (match the workers'). */
  readonly partitions?: number;
  /** A content-type header on requests (default off: costly in kafkajs; bodies are self-describing). */
  readonly headers?: boolean;
  /** Opens every broker connection (kafkajs socketFactory; default plain TCP or TLS): fault drills. */
  readonly socketFactory?: ISocketFactory;
  /**
   * An idempotent kafkajs producer (default true): a produce request sent again after its answer
   * was lost (a broker restart, a reset connection) is not written twice. false: the old
   * non-idempotent producer (each such retry writes its batch again; brokers without idempotence).
   */
  readonly idempotent?: boolean;
}

/**
 * Attempts of one send of the idempotent producer, as many as kafkajs gives one that is not (its
 * default 5, on the client's backoff of 100 ms up to 5 s): a publish to a broker that stays away
 * still fails in ~10 s instead of retrying for ever (kafkajs's default when idempotent).
 */
const IDEMPOTENT_SEND_RETRIES = 5;

/** A reply consumer's heartbeat interval (kafkajs's default, named: LostMemberRestarter is told it). */
const REPLY_HEARTBEAT_MS = 3_000;

/**
 * kafkajs warns that a bounded idempotent producer "may invalidate EoS guarantees": its sequence
 * numbers are rolled back when a send fails, also for a batch the broker took. Here a producer
 * whose send failed is never used again (see SerialSends), so the warning is not logged for it.
 */
const BOUNDED_RETRIES_WARNING = 'Limiting retries for the idempotent producer';

function withoutBoundedRetriesWarning(logger: TransportLogger | undefined): TransportLogger | undefined {
  if (logger === undefined) return undefined;
  return {
    error: (obj, msg) => logger.error(obj, msg),
    warn: (obj, msg) => {
      if (!msg.startsWith(BOUNDED_RETRIES_WARNING)) logger.warn(obj, msg);
    },
    info: (obj, msg) => logger.info(obj, msg),
    debug: (obj, msg) => logger.debug(obj, msg),
  };
}

/**
 * Kafka producer client. Requests go to `{model}.requests.p{priority}` keyed `streamKey ?? id`
 * (acks=all). request() answers arrive on a private single-partition inbox topic read by a
 * private consumer group; the topic and group are deleted on close.
 */
export class KafkaProducer implements Producer {
  readonly kind = 'kafka' as const;
  /** The private inbox of request()s: opened, re-opened when deleted under us, deleted on close. */
  private readonly inboxState: KafkaInbox;
  private readonly kafka: Kafka;
  private readonly router: ReplyRouter;
  private readonly consumers = new Set<ConsumerHandle>();
  private readonly knownTopics = new Set<string>();
  private readonly sizes = new KafkaMessageSizes();
  /**
   * The topic check of the send before this one: each send checks (and creates) its topics after
   * the one before it did and only then goes out, so sends leave in the order they were made.
   */
  private topicsChecked: Promise<void> = Promise.resolve();
  private readonly clientId: string;
  private readonly defaultPriority: number;
  private readonly encoding: WireEncoding;
  private readonly limits: CodecLimits;
  /** transport.kafka.replyTopicPattern: the workers refuse a replyTo outside it, so publish does too. */
  private readonly replyPattern: ReplyTopicPattern | undefined;
  private connecting: Promise<{ admin: Admin }> | undefined;
  /**
   * A long-lived client hits the same kafkajs trait as a worker (see ProducerTopics): once a topic
   * it published to is deleted (a retired model's request topics), each metadata refresh would
   * re-create it or fail every later publish; so its producer is replaced before that.
   */
  private readonly producer: RotatingProducer;
  private readonly idempotent: boolean;
  /**
   * Its sends, one at a time (see SerialSends); a producer that failed one is replaced. Not
   * idempotent too: kafkajs's concurrent sendBatch calls can reach a partition out of order (40
   * frames of a camera published in turn: 38 written after 39), and the fleet orders a stream's
   * frames by their partition's order.
   */
  private readonly serial: SerialSends;
  private closed = false;
  private closing: Promise<void> | undefined;

  constructor(
    private readonly settings: KafkaSettings,
    private readonly options: KafkaProducerOptions = {},
  ) {
    this.idempotent = options.idempotent ?? true;
    this.kafka = createKafka(settings, withoutBoundedRetriesWarning(options.logger), undefined, options.socketFactory);
    this.clientId = options.clientId ?? settings.clientId;
    this.defaultPriority = options.defaultPriority ?? 0;
    this.encoding = options.encoding ?? 'binary';
    this.limits = options.limits ?? DEFAULT_LIMITS;
    this.replyPattern = replyTopicPattern(settings.replyTopicPattern);
    this.router = new ReplyRouter(
      (model) =>
        // Every priority's topic, not p0's: a request without a priority goes out at the model's
        // defaultPriority, and p0 sent an operator to a topic the request never used.
        `that members of the workers' consumer group ${settings.groupId} read ${requestTopicsOf(settings.topicTemplate, model)} (the topic of the request's priority): kafka-consumer-groups.sh --describe --group ${settings.groupId}`,
    );
    this.inboxState = new KafkaInbox({
      clientId: this.clientId,
      replyPattern: this.replyPattern,
      logger: options.logger,
      knownTopics: this.knownTopics,
      connect: () => this.connect(),
      isClosed: () => this.closed,
      consume: async (topic, groupId) => {
        const handle = await this.consume(topic, groupId, true, true, (r) => this.router.deliver(r), undefined);
        return () => this.stopConsumer(handle);
      },
    });
    this.producer = new RotatingProducer({
      // Auto-create off: request topics are created explicitly (send), never by a metadata refresh.
      // Idempotent: kafkajs's sequence handling is safe only with one produce request in flight.
      create: () =>
        this.idempotent
          ? this.kafka.producer({ allowAutoTopicCreation: false, idempotent: true, maxInFlightRequests: 1, retry: { retries: IDEMPOTENT_SEND_RETRIES } })
          : this.kafka.producer({ allowAutoTopicCreation: false }),
      listTopics: async () => (await this.connect()).admin.listTopics(),
      onGone: (gone) => {
        for (const t of gone) this.knownTopics.delete(t);
      },
      ...(options.logger === undefined ? {} : { logger: options.logger }),
      owner: `producer ${this.clientId}`,
    });
    // Its sequence numbers were rolled back, perhaps over a batch the broker took: a later send on
    // it would fail or be dropped as that batch's duplicate (see RotatingProducer.renew).
    this.serial = new SerialSends(() => this.producer.renew());
  }

  /** `<clientId>.inbox.<uuid>`: the replyTo of this producer's request()s now. */
  get inbox(): string {
    return this.inboxState.name;
  }

  private connect(): Promise<{ admin: Admin }> {
    if (this.closed) return Promise.reject(new FleetError('CLOSED', 'kafka producer is closed'));
    this.connecting ??= (async () => {
      const admin = this.kafka.admin();
      try {
        await Promise.all([this.producer.connect(), admin.connect()]);
      } catch (err) {
        this.connecting = undefined;
        throw kafkaError(err, startFailure('connecting the kafka producer failed', err, this.settings));
      }
      return { admin };
    })();
    return this.connecting;
  }

  private topicFor(model: string, priority: number | undefined): string {
    return renderName(this.settings.topicTemplate, model, priority ?? this.defaultPriority);
  }

  /** `retried`: once after a topic was found deleted; `replaced`: sends put off by another's failure. */
  private async send(messages: readonly Outgoing[], retried = false, replaced = 0): Promise<void> {
    const { admin } = await this.connect();
    const topics = [...new Set(messages.map((m) => m.topic))];
    try {
      await this.producer.use(topics, async (producer) => {
        await this.inTurn(async () => {
          const missing = new Map<string, Outgoing>();
          for (const m of messages) if (!this.knownTopics.has(m.topic) && !missing.has(m.topic)) missing.set(m.topic, m);
          if (missing.size > 0) {
            await refuseUnreadPriorities(admin, this.settings.topicTemplate, [...missing.values()]);
            await ensureTopics(admin, [...missing.keys()], this.options.partitions ?? 8);
            for (const t of missing.keys()) this.knownTopics.add(t);
          }
          await this.sizes.check(admin, messages);
        });
        return this.serial.send(producer, messages);
      });
    } catch (err) {
      // Nothing of it went out; the next use gets the fresh producer.
      if (err instanceof ProducerReplaced && replaced < 3) return this.send(messages, retried, replaced + 1);
      // A topic deleted since the last check: the next use checks now; try once more (a chunk
      // that had gone out goes again; the worker side counts duplicates).
      if (isUnknownTopic(err) && !retried) return this.send(messages, true, replaced);
      throw kafkaError(err, 'publishing requests failed');
    }
  }

  /**
   * `check`, once the checks of the sends made before have ended. A camera's frames share a
   * partition and the fleet tells newer frames by their order there: when each send waited on its
   * own topic check, the first sends of a new topic (creating it) went out after later ones that
   * found it made (40 frames published in turn: the first written last, or 0-14 behind 15-29).
   * The caller's continuation runs before the next check starts (it awaited first), so it hands its
   * messages to kafkajs in turn.
   */
  private inTurn(check: () => Promise<void>): Promise<void> {
    const mine = this.topicsChecked.then(check);
    this.topicsChecked = mine.catch(() => undefined);
    return mine;
  }

  async publish(requests: RequestEnvelope | readonly RequestEnvelope[], options: PublishOptions = {}): Promise<void> {
    const list: readonly RequestEnvelope[] = Array.isArray(requests) ? requests : [requests as RequestEnvelope];
    checkRequests(list, 'kafka', this.limits, this.replyPattern);
    refuseUnservedModels(list, this.options.models);
    const encoding = options.encoding ?? this.encoding;
    const contentType = encoding === 'binary' ? CONTENT_TYPES.requestFrame : CONTENT_TYPES.requestJson;
    await this.send(
      list.map((r) => ({
        topic: this.topicFor(r.model, r.priority),
        model: r.model,
        priority: r.priority ?? this.defaultPriority,
        id: r.id,
        message: {
          key: r.streamKey ?? r.id,
          value: encodeRequest(r, encoding),
          ...(this.options.headers === true ? { headers: { [HEADERS.contentType]: contentType } } : {}),
        },
      })),
    );
  }

  async publishRaw(messages: readonly RawMessage[]): Promise<void> {
    await this.send(
      messages.map((m) => ({
        topic: this.topicFor(m.model, m.priority),
        model: m.model,
        priority: m.priority ?? this.defaultPriority,
        message: {
          key: m.key ?? null,
          value: m.body instanceof Uint8Array ? Buffer.from(m.body.buffer, m.body.byteOffset, m.body.byteLength) : JSON.stringify(m.body),
        },
      })),
    );
  }

  async request(request: RequestEnvelope, options: RequestOptions): Promise<ResultEnvelope> {
    const inbox = this.inboxState;
    if (inbox.refusal !== undefined) throw inbox.refusal;
    // Before the inbox opens (0.5-5 s): a model no worker would read is refused at once.
    refuseUnservedModels([request], this.options.models);
    const startedAt = Date.now();
    await inbox.waitOpened(request.id, options.timeoutMs, timerMs(options.timeoutMs));
    const leftMs = Math.max(1, options.timeoutMs - (Date.now() - startedAt));
    return inbox.afterTimeoutCheck(this.router.roundTrip(request.id, leftMs, () => this.publish({ ...request, replyTo: this.inbox }, options), options.timeoutMs, request.model));
  }

  requestMany(requests: readonly RequestEnvelope[], options: RequestOptions): Array<Promise<ResultEnvelope>> {
    const inbox = this.inboxState;
    if (inbox.refusal !== undefined) return refuseAll(requests.length, inbox.refusal);
    const unserved = unservedRefusal(requests, this.options.models);
    if (unserved !== undefined) return refuseAll(requests.length, unserved);
    return this.router
      .roundTripMany(
        requests.map((r) => r.id),
        options.timeoutMs,
        async (waiting) => {
          await inbox.opened();
          // Those whose wait ended while the inbox opened are not sent.
          const due = requests.filter((_, i) => waiting(i));
          if (due.length > 0) await this.publish(due.map((r) => ({ ...r, replyTo: this.inbox })), options);
          options.onPublished?.(due.length);
        },
        requests.map((r) => r.model),
      )
      .map((reply) => inbox.afterTimeoutCheck(reply));
  }

  async prepare(): Promise<void> {
    const inbox = this.inboxState;
    if (inbox.refusal !== undefined) throw inbox.refusal;
    await inbox.opened();
  }

  /** Each step of an opening (an inbox, a consumer) ends it once closed: close() waits for those. */
  private refuseIfClosed(): void {
    if (this.closed) throw new FleetError('CLOSED', 'kafka producer is closed');
  }

  async subscribeReplies(
    replyTo: string,
    onResult: (result: ResultEnvelope) => void,
    options: SubscribeOptions = {},
  ): Promise<ReplySubscription> {
    checkReplyName('kafka', replyTo);
    const { admin } = await this.connect();
    const existed = (await admin.listTopics()).includes(replyTo);
    if (!existed) await ensureTopics(admin, [replyTo], this.options.partitions ?? 8);
    // A topic created just now holds only replies to this subscriber's requests: read it all.
    const fromBeginning = options.fromBeginning ?? !existed;
    const groupId = options.groupId ?? `${this.clientId}.replies.${randomUUID()}`;
    const handle = await this.consume(replyTo, groupId, options.groupId === undefined, fromBeginning, onResult, options.onError);
    return { close: () => this.stopConsumer(handle) };
  }

  private async consume(
    topic: string,
    groupId: string,
    ownGroup: boolean,
    fromBeginning: boolean,
    onResult: (r: ResultEnvelope) => void,
    onError: ((e: Error) => void) | undefined,
  ): Promise<ConsumerHandle> {
    const consumer = this.kafka.consumer({ groupId, maxWaitTimeInMs: 100, sessionTimeout: 30_000, heartbeatInterval: REPLY_HEARTBEAT_MS, allowAutoTopicCreation: false });
    const handle: ConsumerHandle = { consumer, groupId, ownGroup };
    this.consumers.add(handle);
    // After a broker outage its replies would otherwise wait out the session of its pre-restart member.
    new StaleMemberRemover(this.kafka, this.options.logger, () => this.closed).watch(consumer);
    // Resolves once offsets are resolved (first fetch after joining): replies from then on are seen.
    const fetched = new Promise<void>((resolve) => {
      let joined = false;
      consumer.on(consumer.events.GROUP_JOIN, () => {
        joined = true;
      });
      consumer.on(consumer.events.FETCH, () => {
        if (joined) resolve();
      });
    });
    try {
      await consumer.connect();
      this.refuseIfClosed();
      // A topic created a moment ago may not be in the broker's metadata yet (retriable
      // UNKNOWN_TOPIC_OR_PARTITION on a busy KRaft controller): retry with backoff.
      for (let attempt = 1; ; attempt++) {
        try {
          await consumer.subscribe({ topics: [topic], fromBeginning });
          break;
        } catch (err) {
          if (attempt >= 8 || (err as { retriable?: boolean }).retriable !== true) throw err;
          await new Promise((resolve) => setTimeout(resolve, 100 * 2 ** Math.min(attempt, 5)));
          this.refuseIfClosed();
        }
      }
      const run = (): Promise<void> =>
        consumer.run({
          eachBatch: async ({ batch }) => {
            for (const m of batch.messages) {
              let result: ResultEnvelope;
              try {
                result = decodeResult(m.value ?? Buffer.alloc(0), this.limits);
              } catch (err) {
                onError?.(err as Error);
                continue;
              }
              onResult(result);
            }
          },
        });
      // Made before the run: it must see the first group join.
      const restarter = (handle.restarter = new LostMemberRestarter(consumer, {
        heartbeatIntervalMs: REPLY_HEARTBEAT_MS,
        sessionTimeoutMs: 30_000,
        what: `the replies on ${topic}`,
        logger: this.options.logger,
        isClosed: () => this.closed || !this.consumers.has(handle),
        rerun: run,
      }));
      await run();
      restarter.start();
      if (!fromBeginning) await fetched;
    } catch (err) {
      await this.stopConsumer(handle);
      // close() may have stopped the handle while it was still connecting; a consumer that
      // connected after that must not stay connected.
      await consumer.disconnect().catch(() => undefined);
      throw kafkaError(err, `subscribing to replies on ${topic} failed`);
    }
    return handle;
  }

  private async stopConsumer(handle: ConsumerHandle): Promise<void> {
    if (!this.consumers.delete(handle)) return;
    handle.restarter?.stop();
    await handle.consumer.disconnect().catch(() => undefined);
    if (handle.ownGroup && this.connecting !== undefined) {
      const { admin } = await this.connecting;
      await admin.deleteGroups([handle.groupId]).catch(() => undefined);
    }
  }

  /**
   * One closing for every caller: a second close() (a signal handler and a finally block) used to
   * resolve at once, and its caller exited with the inbox topic and group not yet deleted.
   */
  close(): Promise<void> {
    this.closing ??= this.closeNow();
    return this.closing;
  }

  private async closeNow(): Promise<void> {
    this.closed = true;
    const closedError = new FleetError('CLOSED', 'producer closed before the reply arrived');
    this.router.failAll(closedError);
    await this.inboxState.closing(closedError);
    for (const handle of [...this.consumers]) await this.stopConsumer(handle);
    const connected = this.connecting;
    if (connected === undefined) return;
    const { admin } = await connected.catch(() => ({ admin: undefined }));
    if (admin !== undefined) await this.inboxState.deleteTopic(admin);
    await Promise.allSettled([this.producer.disconnect(), admin?.disconnect()]);
  }
}

/** A model's request topics, `{priority}` as `*` (`m.requests.p*`): each priority has its own. */
function requestTopicsOf(template: string, model: string): string {
  return renderName(template.split('{priority}').join('*'), model);
}
