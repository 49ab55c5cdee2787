import { Partitioners, type Admin, type ICustomPartitioner, type Kafka, type Message, type Producer } from 'kafkajs';
import type { KafkaSettings } from '../../contracts/fleet-config.ts';
import { ErrorThrottle } from '../error-throttle.ts';
import { HEADERS } from '../names.ts';
import { DEFAULT_KAFKA_RETRIES, isUnknownTopic, SEND_GIVEN_UP, type TransportLogger } from './kafka-client.ts';
import { apartByInbox, chunkByBytes, groupByTopic, type OutgoingMessage } from './kafka-outcomes.ts';
import { ProducerWatch } from './producer-watch.ts';
import { ReplyTopics } from './reply-topics.ts';
import { RotatingProducer } from './rotating-producer.ts';

export interface ResultSenderOptions {
  /** Unique per worker process: the transactional id in exactlyOnce mode. */
  readonly transactionalId: string;
  /** Partitions of the topics created on first use. */
  readonly partitions: number;
  /** How long sends may go without a success while they are attempted before delivering() is false. */
  readonly contactWindowMs: number;
  /** kafkajs retries of an at-least-once send (the transport's; default DEFAULT_KAFKA_RETRIES). */
  readonly retries?: number;
  readonly logger?: TransportLogger;
}

interface QueuedSend {
  /** Less those acknowledged once its send was given up (requeueAround). */
  messages: OutgoingMessage[];
  readonly resolve: () => void;
  readonly reject: (err: unknown) => void;
  /** A first send to topics just created: it leaves with the others of their creation only (see pumpSends). */
  fresh?: number;
}

/** A send in flight longer than this has its topics looked for (see goneWhileSending); loopback sends take ~1-10 ms. */
const STALL_CHECK_MS = 300;

/** One send of the at-least-once path. */
interface Send {
  /** Its results went again in other sends (requeueAround), so it sends nothing more. */
  abandoned: boolean;
  /** The producer it went out on, once it did. */
  producer?: Producer;
  /** The messages of its produce request in flight (see apartByInbox), as routed. */
  inFlight?: readonly OutgoingMessage[];
  /** When its produce request in flight started (performance.now()): each has its own STALL_CHECK_MS. */
  since?: number;
}

/** Of one at-least-once producer: set once the send on it was given up (requeueAround). */
export interface ProducerState {
  givenUp: boolean;
}

/**
 * The at-least-once producer's partitioner: kafkajs's default, with two changes for the retries
 * kafkajs makes of a produce request (it partitions the messages again on each attempt, before
 * sending). A keyless message (a DLQ record of a request without a key) stays on the partition
 * of its first attempt: the idempotent producer's broker drops a retried batch by its sequence
 * numbers alone, so a batch of other messages in their place would be dropped as its duplicate
 * (keyed messages, results among them, hash to the same partition each time). And a given-up
 * send's attempts stop: the throw is not retriable, so kafkajs fails the send before sending.
 */
export function retryStablePartitioner(state: ProducerState): ICustomPartitioner {
  return () => {
    const pick = Partitioners.DefaultPartitioner();
    const keyless = new WeakMap<Message, number>();
    return (args) => {
      if (state.givenUp) throw Object.assign(new Error(SEND_GIVEN_UP), { retriable: false });
      const { message } = args;
      if ((message.key !== null && message.key !== undefined) || (message.partition !== null && message.partition !== undefined)) return pick(args);
      const first = keyless.get(message);
      if (first !== undefined && args.partitionMetadata.some((p) => p.partitionId === first)) return first;
      const partition = pick(args);
      keyless.set(message, partition);
      return partition;
    };
  };
}

/**
 * The worker's way out to Kafka: its kafkajs producer (replaced when it has written to a topic
 * that is gone since, see ProducerTopics), the topics known to exist (others are created on first
 * use, in the background: see ReplyTopics), and the serialized, coalescing at-least-once send
 * path. In exactlyOnce mode the transport's committer asks it for the producer of each
 * transaction instead. JS thread only; the admin client is the transport's.
 */
export class ResultSender {
  private readonly producer: RotatingProducer;
  private readonly topics: ReplyTopics;
  private readonly queue: QueuedSend[] = [];
  private sending = false;
  /** Messages the brokers acknowledged, so a failed or given-up send's retries skip them (weak: no growth). */
  private readonly acked = new WeakSet<OutgoingMessage>();
  private readonly watch: ProducerWatch;
  /** Of each at-least-once producer (weak: replaced producers go). */
  private readonly producerStates = new WeakMap<Producer, ProducerState>();

  constructor(
    kafka: Kafka,
    settings: KafkaSettings,
    private readonly admin: Admin,
    options: ResultSenderOptions,
  ) {
    this.watch = new ProducerWatch(options.contactWindowMs);
    // One line per 10 s: under client churn every closing client with requests in flight makes one.
    const goneLines = new ErrorThrottle();
    this.topics = new ReplyTopics(admin, kafka, options.partitions, (inbox) => {
      const { log, heldBack } = goneLines.note(Date.now());
      if (!log) return;
      options.logger?.warn(
        { inbox, moreInboxesSinceLastLine: heldBack },
        `reply topic ${inbox}, a request() client's private inbox, is gone (the client closed before its results): ` +
          `not created again; its results go to their model's replies topic with header ${HEADERS.replyToGone}`,
      );
    });
    this.producer = new RotatingProducer({
      // Auto-create off: topics are created explicitly (ensureKnown), never by a metadata refresh.
      create: () =>
        settings.exactlyOnce
          ? kafka.producer({
              transactionalId: options.transactionalId,
              transactionTimeout: settings.transactionTimeoutMs,
              idempotent: true,
              maxInFlightRequests: 1,
              allowAutoTopicCreation: false,
            })
          : this.atLeastOnceProducer(kafka, options.retries ?? DEFAULT_KAFKA_RETRIES),
      listTopics: () => admin.listTopics(),
      // Forgotten as created: a result for one of them creates it again, like a first use.
      onGone: (gone) => {
        for (const t of gone) this.topics.forget(t);
      },
      ...(options.logger === undefined ? {} : { logger: options.logger }),
      owner: 'results',
    });
  }

  /**
   * Idempotent: kafkajs retries a produce request whole when any partition of it failed (a reply
   * topic deleted, a leader moving, an answer lost), and each retry wrote the partitions the broker
   * had taken again (5 copies of a result around a deleted reply topic); the broker drops those
   * now. The retries stay the transport's (kafkajs's default for an idempotent producer is for
   * ever). No maxInFlightRequests: kafkajs already sends an idempotent producer's produce requests
   * to a broker one at a time (a lock per broker), and this path sends one at a time anyway. A
   * producer that failed a send is replaced (see sendNow).
   */
  private atLeastOnceProducer(kafka: Kafka, retries: number): Producer {
    const state: ProducerState = { givenUp: false };
    const producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: true, retry: { retries }, createPartitioner: retryStablePartitioner(state) });
    this.producerStates.set(producer, state);
    return producer;
  }

  /** Connects the first producer; `existing` are topics just created (or found) by the caller. */
  async connect(existing: readonly string[]): Promise<void> {
    this.topics.add(existing);
    await this.producer.connect();
  }

  async disconnect(): Promise<void> {
    await this.producer.disconnect();
  }

  /**
   * Runs `work` with the producer once `topics` exist: each send, and in exactlyOnce mode each of
   * the committer's transactions (which run one at a time, so no send uses a producer while it is
   * replaced by a fresh one).
   */
  async withProducer<T>(topics: readonly string[], work: (producer: Producer) => Promise<T>): Promise<T> {
    // Every way results leave goes through here (both modes), so readiness sees them all.
    this.watch.onAttempt();
    try {
      const out = await this.producer.use(topics, async (producer) => {
        await this.ensureKnown(topics);
        return work(producer);
      });
      this.watch.onSuccess();
      return out;
    } catch (err) {
      this.watch.onFailure();
      throw err;
    }
  }

  /** Whether results get out (see ProducerWatch); true while there is nothing to send. */
  delivering(nowMs = Date.now()): boolean {
    return this.watch.delivering(nowMs);
  }

  /** A transaction failed: the next one gets a fresh producer (see RotatingProducer.renew). */
  renewProducer(): void {
    this.producer.renew();
  }

  /** Whether the brokers acknowledged `message` (also when the send it was in failed later). */
  acknowledged(message: OutgoingMessage): boolean {
    return this.acked.has(message) || (message.orElse !== undefined && this.acked.has(message.orElse));
  }

  /**
   * The messages as they leave: one to a client's inbox found gone goes to its `orElse` instead.
   * Applied again inside each send and transaction, after its topics were checked: an inbox can be
   * deleted after the message was queued (see sendNow).
   */
  routed(messages: readonly OutgoingMessage[]): readonly OutgoingMessage[] {
    // The same array when nothing goes elsewhere (nearly always): no allocation per send.
    for (const m of messages) {
      if (m.orElse !== undefined && this.topics.isGone(m.topic)) return messages.map((n) => (n.orElse !== undefined && this.topics.isGone(n.topic) ? n.orElse : n));
    }
    return messages;
  }

  /** Whether every message's topic is known to exist: a send of them leaves without waiting for a creation. */
  ready(messages: readonly OutgoingMessage[]): boolean {
    return this.topics.allKnown(messages);
  }

  /** Whether the creation of every new topic of the messages was asked for already (by another send). */
  awaited(messages: readonly OutgoingMessage[]): boolean {
    return this.topics.allAwaited(messages);
  }

  /** Resolves once every message's topic exists (created in the background when new). */
  whenReady(messages: readonly OutgoingMessage[]): Promise<void> {
    return new Promise<void>((resolve, reject) => this.topics.whenKnown(messages, () => resolve(), reject));
  }

  /**
   * Sends are serialized and coalesced: settles that arrive while a send is in flight leave
   * together in the next one. Concurrent kafkajs sendBatch calls on one connection were measured
   * ~1.5-3x slower per message than the same messages sent one batch after another. A failed
   * coalesced send is retried per settle, so one bad settle cannot fail its neighbours. A send
   * naming a topic being created waits for it apart and then joins the queue (those waiting for
   * one topic in the order they were sent), so sends to topics that exist go on meanwhile; a
   * failed creation fails it. A send held up on a topic deleted since does not hold the others
   * either (goneWhileSending).
   */
  send(messages: OutgoingMessage[]): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const queued: QueuedSend = { messages, resolve, reject };
      if (this.topics.allKnown(messages)) this.enqueue(queued);
      else {
        this.topics.whenKnown(
          messages,
          (batch) => {
            queued.fresh = batch;
            this.enqueue(queued);
          },
          reject,
        );
      }
    });
  }

  private enqueue(queued: QueuedSend): void {
    this.queue.push(queued);
    void this.pumpSends();
  }

  private async pumpSends(): Promise<void> {
    if (this.sending) return;
    this.sending = true;
    try {
      while (this.queue.length > 0) {
        // A topic just created can still refuse a write (its leader is not serving it yet, see
        // ReplyTopics): kafkajs then retries the whole produce request, and results for other
        // topics coalesced with it would go out twice. First sends to the topics of one creation
        // leave together, apart from the rest, in their place in the order.
        const fresh = this.queue[0]?.fresh;
        let end = 1;
        while (end < this.queue.length && this.queue[end]?.fresh === fresh) end++;
        const group = this.queue.splice(0, end);
        const messages = group.flatMap((g) => g.messages);
        const send: Send = { abandoned: false };
        const done = this.sendNow(messages, send).then(
          () => undefined,
          (err: unknown) => ({ err }),
        );
        const gone = await this.goneWhileSending(done, messages, send);
        if (gone.length > 0) {
          send.abandoned = true;
          this.requeueAround(gone, group, send);
          continue;
        }
        const failure = await done;
        if (failure === undefined) {
          for (const g of group) g.resolve();
          continue;
        }
        if (group.length === 1) {
          group[0]?.reject(failure.err);
          continue;
        }
        // Messages of the chunks the brokers acknowledged before the failure went out already.
        for (const g of group) await this.sendNow(g.messages.filter((m) => !this.acknowledged(m))).then(g.resolve, g.reject);
      }
    } finally {
      this.sending = false;
    }
  }

  /**
   * While a produce request of `send` (done: its end) is in flight past STALL_CHECK_MS, looks for
   * its topics now and then; the ones missing, or none once the send is done. A send to a topic
   * deleted since the producer last wrote to it is retried by kafkajs for seconds (~5 s with the
   * default retries) before it fails, and the serialized send path would hold every other result
   * for that long. Only the request in flight counts: one found stalled on a topic is given up,
   * and a request that may still go through must not be (requeueAround sends it again).
   */
  private async goneWhileSending(done: Promise<unknown>, messages: readonly OutgoingMessage[], send: Send): Promise<string[]> {
    let finished = false;
    const ended = done.then(() => {
      finished = true;
    });
    let seen: number | undefined;
    let backoffMs = STALL_CHECK_MS;
    let waitMs = STALL_CHECK_MS;
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([ended, new Promise((resolve) => (timer = setTimeout(resolve, waitMs)))]);
      clearTimeout(timer);
      if (finished) return [];
      if (send.since !== seen) {
        // A request started since the last look (the send's first, or a later one): its looks
        // start over, once it is out STALL_CHECK_MS.
        seen = send.since;
        backoffMs = STALL_CHECK_MS;
        const outMs = seen === undefined ? Infinity : performance.now() - seen;
        if (outMs < STALL_CHECK_MS) {
          waitMs = STALL_CHECK_MS - outMs;
          continue;
        }
      }
      waitMs = backoffMs = Math.min(2 * backoffMs, 2_000);
      // Raced with the send: with the brokers unreachable the listing can take far longer than the
      // send, whose results must not wait for it once the brokers answer again.
      const listing = this.admin.listTopics().then(
        (topics) => new Set(topics),
        () => undefined,
      );
      const existing = await Promise.race([listing, ended.then(() => undefined)]);
      if (finished) return [];
      if (existing === undefined) continue;
      const gone = [...new Set((send.inFlight ?? this.routed(messages)).map((m) => m.topic))].filter((t) => !existing.has(t));
      if (gone.length > 0) return gone;
    }
  }

  /**
   * `group`'s send writes to `gone`, deleted: it is left to fail on its own (its outcome ignored)
   * and its results go again, but for those of its produce requests the brokers acknowledged (a
   * request stalled on a client's inbox has that inbox's results only, see apartByInbox; one
   * stalled on another topic may have had others written, which go again: at-least-once). Results for
   * other topics go at once, on a fresh producer (the stalled one's metadata refreshes include the
   * deleted topic); those for a gone topic, also the ones queued after them, wait for it to be
   * created again (a client's inbox: found gone, their orElse) in the order they were sent.
   */
  private requeueAround(gone: readonly string[], group: readonly QueuedSend[], send: Send): void {
    this.producer.renew();
    // kafkajs would go on retrying its produce request, the whole of it, until it goes through
    // once the gone topic is created again (by the requeued results): writing those a second time.
    const state = send.producer === undefined ? undefined : this.producerStates.get(send.producer);
    if (state !== undefined) state.givenUp = true;
    for (const t of gone) this.topics.forget(t);
    const again: QueuedSend[] = [];
    for (const g of group) {
      delete g.fresh;
      // Written already: sent again on a fresh producer, the broker would take them as new.
      g.messages = g.messages.filter((m) => !this.acknowledged(m));
      if (g.messages.length === 0) g.resolve();
      else again.push(g);
    }
    const held = [...again, ...this.queue.splice(0)];
    for (const g of held) {
      if (this.topics.allKnown(g.messages)) {
        this.queue.push(g);
        continue;
      }
      this.topics.whenKnown(
        g.messages,
        (batch) => {
          g.fresh = batch;
          this.enqueue(g);
        },
        g.reject,
      );
    }
  }

  private async sendNow(messages: readonly OutgoingMessage[], send: Send = { abandoned: false }): Promise<void> {
    if (messages.length === 0) return;
    const topics = [...new Set(this.routed(messages).map((m) => m.topic))];
    const sendAll = (list: readonly OutgoingMessage[]) => async (producer: Producer): Promise<void> => {
      send.producer = producer;
      // Routed after withProducer checked the topics: a retry after an inbox was deleted finds it gone there.
      const requests = chunkByBytes(this.routed(list)).flatMap((chunk) => apartByInbox(chunk));
      for (const request of requests) {
        if (send.abandoned) throw new Error('send abandoned: its results went again apart');
        send.inFlight = request;
        send.since = performance.now();
        try {
          await producer.sendBatch({ topicMessages: groupByTopic(request), acks: -1 });
        } catch (err) {
          // kafkajs rolled back the sequence numbers of every partition of the failed request, also
          // of those the broker wrote: this producer's next batch to one of them would be refused,
          // or, of the same size, dropped by the broker as that batch's duplicate though reported
          // written. A given-up send's producer was replaced already.
          if (!send.abandoned) this.producer.renew();
          throw err;
        }
        // One request (nearly every send) is all or nothing: nothing to remember, and no weak
        // entries for the collector to process per result.
        if (requests.length > 1) for (const m of request) this.acked.add(m);
      }
      delete send.inFlight;
    };
    try {
      await this.withProducer(topics, sendAll(messages));
    } catch (err) {
      if (!isUnknownTopic(err) || send.abandoned) throw err;
      // A topic deleted after the last check (or while kafkajs refreshed): the next use checks
      // now, replaces the producer if it knows a deleted topic and creates this send's topics
      // again if they are gone (a client's inbox is found gone instead, and its results go to
      // their orElse). Requests acknowledged before do not go again; the failed one does
      // (at-least-once: of a request naming other topics too, those may have been written).
      await this.withProducer(topics, sendAll(messages.filter((m) => !this.acknowledged(m))));
    }
  }

  /**
   * Sends and transactions wait for new topics before they start (send, whenReady): this only
   * covers a topic forgotten since as deleted (onGone) or by the bounded cache, created here again
   * (a client's inbox: looked for, and found gone).
   */
  private async ensureKnown(topics: readonly string[]): Promise<void> {
    for (const topic of topics) if (!this.topics.has(topic)) return this.topics.ensure(topics);
  }
}
