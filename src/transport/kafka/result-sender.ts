import type { Admin, Kafka, Producer } from 'kafkajs';
import type { KafkaSettings } from '../../contracts/fleet-config.ts';
import { ensureTopics, type TransportLogger } from './kafka-client.ts';
import { chunkByBytes, groupByTopic, type OutgoingMessage } from './kafka-outcomes.ts';
import { isUnknownTopic, ProducerTopics } from './producer-topics.ts';

export interface ResultSenderOptions {
  /** Unique per worker process: the transactional id in exactlyOnce mode. */
  readonly transactionalId: string;
  /** Partitions of the topics created on first use. */
  readonly partitions: number;
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
  private producer: Producer | undefined;
  private readonly knownTopics = new Set<string>();
  private readonly producerTopics: ProducerTopics;
  private readonly queue: Array<{ messages: OutgoingMessage[]; resolve: () => void; reject: (err: unknown) => void }> = [];
  private sending = false;

  constructor(
    private readonly kafka: Kafka,
    private readonly settings: KafkaSettings,
    private readonly admin: Admin,
    private readonly options: ResultSenderOptions,
  ) {
    this.producerTopics = new ProducerTopics(() => admin.listTopics());
  }

  /** Connects the first producer; `existing` are topics just created (or found) by the caller. */
  async connect(existing: readonly string[]): Promise<void> {
    for (const t of existing) this.knownTopics.add(t);
    this.producer = this.newProducer();
    await this.producer.connect();
  }

  async disconnect(): Promise<void> {
    await this.producer?.disconnect();
  }

  /** A transaction (or send) failed: an unknown topic means the cluster is checked before the next. */
  failed(err: unknown): void {
    if (isUnknownTopic(err)) this.producerTopics.markSuspect();
  }

  /**
   * Sends are serialized and coalesced: settles that arrive while a send is in flight leave
   * together in the next one. Concurrent kafkajs sendBatch calls on one connection were measured
   * ~1.5-3x slower per message than the same messages sent one batch after another. A failed
   * coalesced send is retried per settle, so one bad settle cannot fail its neighbours.
   */
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
          for (const g of group) await this.sendNow(g.messages).then(g.resolve, g.reject);
        }
      }
    } finally {
      this.sending = false;
    }
  }

  private async sendNow(messages: readonly OutgoingMessage[]): Promise<void> {
    const topics = [...new Set(messages.map((m) => m.topic))];
    const sendAll = async (producer: Producer): Promise<void> => {
      for (const chunk of chunkByBytes(messages)) await producer.sendBatch({ topicMessages: groupByTopic(chunk), acks: -1 });
    };
    try {
      await sendAll(await this.producerFor(topics));
    } catch (err) {
      if (!isUnknownTopic(err)) throw err;
      // A topic deleted after the last check (or while kafkajs refreshed): check now, replace the
      // producer if it knows a deleted topic, create this send's topics again if they are gone,
      // and try once more. A chunk that had gone out goes again: at-least-once.
      this.producerTopics.markSuspect();
      await sendAll(await this.producerFor(topics));
    }
  }

  /** Auto-create off: topics are created explicitly (ensureKnown), never by a metadata refresh. */
  private newProducer(): Producer {
    return this.settings.exactlyOnce
      ? this.kafka.producer({ transactionalId: this.options.transactionalId, idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false })
      : this.kafka.producer({ allowAutoTopicCreation: false });
  }

  /**
   * The producer to send to `topics` with, once they exist: a fresh one when the current one has
   * sent to a topic that is gone since, or to too many (see ProducerTopics). Called only from the
   * serialized send path (or the committer's one-at-a-time loop), so no send is using the producer
   * that is replaced.
   */
  async producerFor(topics: readonly string[]): Promise<Producer> {
    const { fresh, gone } = await this.producerTopics.beforeSend(topics, Date.now());
    // Forgotten as created: a result for one of them creates it again, like a first use.
    for (const t of gone) this.knownTopics.delete(t);
    if (fresh) {
      const replacement = this.newProducer();
      await replacement.connect();
      const old = this.producer;
      this.producer = replacement;
      this.options.logger?.info(
        { gone: gone.slice(0, 5), goneCount: gone.length, topics: this.producerTopics.size },
        gone.length > 0 ? 'kafka producer replaced: reply topics it had sent to were deleted' : 'kafka producer replaced: it had sent to many reply topics',
      );
      this.producerTopics.reset();
      void old?.disconnect().catch(() => undefined);
    }
    await this.ensureKnown(topics);
    this.producerTopics.record(topics);
    return this.producer as Producer;
  }

  /** Reply topics named by requests are created on first use (auto-create may be off). */
  async ensureKnown(topics: readonly string[]): Promise<void> {
    const unknown = [...new Set(topics)].filter((t) => !this.knownTopics.has(t));
    if (unknown.length === 0) return;
    await ensureTopics(this.admin, unknown, this.options.partitions);
    // Only a cache of what exists, kept bounded: every request() client names its own inbox.
    if (this.knownTopics.size + unknown.length > 10_000) this.knownTopics.clear();
    for (const t of unknown) this.knownTopics.add(t);
  }
}
