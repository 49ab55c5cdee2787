import type { Producer } from 'kafkajs';
import { mayBeUnknownTopic, type TransportLogger } from './kafka-client.ts';
import { ProducerTopics } from './producer-topics.ts';

export interface RotatingProducerOptions {
  /** A new, unconnected kafkajs producer (auto-create off: topics are created explicitly). */
  readonly create: () => Producer;
  /** Every topic of the cluster (one admin round trip). */
  readonly listTopics: () => Promise<readonly string[]>;
  /** Topics it had written to that are gone: the owner forgets them as created. */
  readonly onGone: (gone: readonly string[]) => void;
  readonly logger?: TransportLogger;
  /** Names the owner in the replacement log line. */
  readonly owner: string;
}

interface Slot {
  readonly producer: Producer;
  users: number;
}

/**
 * A kafkajs producer that is replaced by a fresh one before kafkajs would refresh metadata with a
 * topic that is gone (see ProducerTopics for why). Sends on the replaced producer finish on it; it
 * is disconnected when the last one ends. Used by the worker's result path and by the producer
 * client. JS thread only; checks and replacements run one at a time.
 */
export class RotatingProducer {
  private slot: Slot | undefined;
  private chain: Promise<unknown> = Promise.resolve();
  private readonly topics: ProducerTopics;
  private renewing = false;

  constructor(private readonly options: RotatingProducerOptions) {
    this.topics = new ProducerTopics(options.listTopics);
  }

  async connect(): Promise<void> {
    const producer = this.options.create();
    await producer.connect();
    this.slot = { producer, users: 0 };
  }

  /**
   * The next use gets a fresh producer. An idempotent kafkajs producer whose produce request failed
   * rolls back the sequence numbers of every partition in it, also those the broker accepted
   * (kafkajs sendMessages), so each later send to them fails with OUT_OF_ORDER_SEQUENCE_NUMBER; a
   * fresh one starts new sequences (and, transactional, fences this one).
   */
  renew(): void {
    this.renewing = true;
  }

  async disconnect(): Promise<void> {
    await this.slot?.producer.disconnect();
  }

  /**
   * Runs `work` with the producer for writing to `topics` (fresh when the current one has written
   * to a topic that is gone since). `work` should make sure its topics exist before sending.
   */
  async use<T>(topics: readonly string[], work: (producer: Producer) => Promise<T>): Promise<T> {
    const slot = await this.slotFor(topics);
    slot.users++;
    try {
      return await work(slot.producer);
    } catch (err) {
      // An unknown topic (or, of a transaction, maybe one: see mayBeUnknownTopic): the cluster is
      // checked before the next use.
      if (mayBeUnknownTopic(err)) this.topics.markSuspect();
      throw err;
    } finally {
      slot.users--;
      if (slot !== this.slot && slot.users === 0) void slot.producer.disconnect().catch(() => undefined);
    }
  }

  private slotFor(topics: readonly string[]): Promise<Slot> {
    const next = this.chain.then(async () => {
      const current = this.slot;
      if (current === undefined) throw new Error(`${this.options.owner}: kafka producer used before connect()`);
      const { fresh, gone } = await this.topics.beforeSend(topics, Date.now());
      if (gone.length > 0) this.options.onGone(gone);
      let slot = current;
      if (fresh || this.renewing) {
        const producer = this.options.create();
        await producer.connect();
        slot = this.slot = { producer, users: 0 };
        this.renewing = false;
        const why = !fresh ? 'a send failed' : gone.length > 0 ? 'topics it had written to were deleted' : 'it had written to many topics';
        this.options.logger?.info({ owner: this.options.owner, gone: gone.slice(0, 5), goneCount: gone.length, topics: this.topics.size }, `kafka producer replaced: ${why}`);
        this.topics.reset();
        if (current.users === 0) void current.producer.disconnect().catch(() => undefined);
      }
      // kafkajs adds them to its set when the send starts, whether or not it succeeds.
      this.topics.record(topics);
      return slot;
    });
    this.chain = next.catch(() => undefined);
    return next;
  }
}
