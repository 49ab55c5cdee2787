import type { Admin, Kafka, Producer } from 'kafkajs';
import type { KafkaSettings } from '../../contracts/fleet-config.ts';
import { ensureTopics, isUnknownTopic, type TransportLogger } from './kafka-client.ts';
import { chunkByBytes, groupByTopic, type OutgoingMessage } from './kafka-outcomes.ts';
import { ProducerWatch } from './producer-watch.ts';
import { RotatingProducer } from './rotating-producer.ts';

export interface ResultSenderOptions {
  /** Unique per worker process: the transactional id in exactlyOnce mode. */
  readonly transactionalId: string;
  /** Partitions of the topics created on first use. */
  readonly partitions: number;
  /** How long sends may go without a success while they are attempted before delivering() is false. */
  readonly contactWindowMs: number;
  readonly logger?: TransportLogger;
}

/**
 * The worker's way out to Kafka: its kafkajs producer (replaced when it has written to a topic
 * that is gone since, see ProducerTopics), the topics known to exist (others are created on first
 * use: auto-create may be off, and metadata refreshes never create topics), and the serialized,
 * coalescing at-least-once send path. In exactlyOnce mode the transport's committer asks it for
 * the producer of each transaction instead. JS thread only; the admin client is the transport's.
 */
export class ResultSender {
  private readonly producer: RotatingProducer;
  private readonly knownTopics = new Set<string>();
  private readonly queue: Array<{ messages: OutgoingMessage[]; resolve: () => void; reject: (err: unknown) => void }> = [];
  private sending = false;
  /** Messages the brokers acknowledged, so a failed coalesced send's retries skip them (weak: no growth). */
  private readonly acked = new WeakSet<OutgoingMessage>();
  private readonly watch: ProducerWatch;

  constructor(
    kafka: Kafka,
    settings: KafkaSettings,
    private readonly admin: Admin,
    private readonly options: ResultSenderOptions,
  ) {
    this.watch = new ProducerWatch(options.contactWindowMs);
    this.producer = new RotatingProducer({
      // Auto-create off: topics are created explicitly (ensureKnown), never by a metadata refresh.
      create: () =>
        settings.exactlyOnce
          ? kafka.producer({ transactionalId: options.transactionalId, idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false })
          : kafka.producer({ allowAutoTopicCreation: false }),
      listTopics: () => admin.listTopics(),
      // Forgotten as created: a result for one of them creates it again, like a first use.
      onGone: (gone) => {
        for (const t of gone) this.knownTopics.delete(t);
      },
      ...(options.logger === undefined ? {} : { logger: options.logger }),
      owner: 'results',
    });
  }

  /** Connects the first producer; `existing` are topics just created (or found) by the caller. */
  async connect(existing: readonly string[]): Promise<void> {
    for (const t of existing) this.knownTopics.add(t);
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

  /**
   * Sends are serialized and coalesced: settles that arrive while a send is in flight leave
   * together in the next one. Concurrent kafkajs sendBatch calls on one connection were measured
   * ~1.5-3x slower per message than the same messages sent one batch after another. A failed
   * coalesced send is retried per settle, so one bad settle cannot fail its neighbours.
   */
  /** Whether the brokers acknowledged `message` (also when the send it was in failed later). */
  acknowledged(message: OutgoingMessage): boolean {
    return this.acked.has(message);
  }

  send(messages: OutgoingMessage[]): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ messages, resolve, reject });
      void this.pumpSends();
    });
  }

  private async pumpSends(): Promise<void> {
    if (this.sending) return;
    this.sending = true;
    try {
      while (this.queue.length > 0) {
        const group = this.queue.splice(0);
        try {
          await this.sendNow(group.flatMap((g) => g.messages));
          for (const g of group) g.resolve();
        } catch (err) {
          if (group.length === 1) {
            group[0]?.reject(err);
            continue;
          }
          // Messages of the chunks the brokers acknowledged before the failure went out already.
          for (const g of group) await this.sendNow(g.messages.filter((m) => !this.acked.has(m))).then(g.resolve, g.reject);
        }
      }
    } finally {
      this.sending = false;
    }
  }

  private async sendNow(messages: readonly OutgoingMessage[]): Promise<void> {
    if (messages.length === 0) return;
    const topics = [...new Set(messages.map((m) => m.topic))];
    const sendAll = async (producer: Producer): Promise<void> => {
      const chunks = chunkByBytes(messages);
      for (const chunk of chunks) {
        await producer.sendBatch({ topicMessages: groupByTopic(chunk), acks: -1 });
        // One chunk (nearly every send) is all or nothing: nothing to remember, and no weak
        // entries for the collector to process per result.
        if (chunks.length > 1) for (const m of chunk) this.acked.add(m);
      }
    };
    try {
      await this.withProducer(topics, sendAll);
    } catch (err) {
      if (!isUnknownTopic(err)) throw err;
      // A topic deleted after the last check (or while kafkajs refreshed): the next use checks
      // now, replaces the producer if it knows a deleted topic and creates this send's topics
      // again if they are gone. A chunk that had gone out goes again: at-least-once.
      await this.withProducer(topics, sendAll);
    }
  }

  /** Reply topics named by requests are created on first use (auto-create may be off). */
  private async ensureKnown(topics: readonly string[]): Promise<void> {
    const unknown = [...new Set(topics)].filter((t) => !this.knownTopics.has(t));
    if (unknown.length === 0) return;
    await ensureTopics(this.admin, unknown, this.options.partitions);
    // Only a cache of what exists, kept bounded: every request() client names its own inbox.
    if (this.knownTopics.size + unknown.length > 10_000) this.knownTopics.clear();
    for (const t of unknown) this.knownTopics.add(t);
  }
}
