import type { Producer } from 'kafkajs';
import { chunkByBytes, groupByTopic, type OutgoingMessage } from '../transport/kafka/kafka-outcomes.ts';

/** A send that waited on a producer whose earlier send failed: it is to be sent on a fresh one. */
export class ProducerReplaced extends Error {
  constructor() {
    super('the kafka producer failed a send before this one went out');
  }
}

interface Waiting {
  readonly producer: Producer;
  readonly messages: readonly OutgoingMessage[];
  readonly resolve: () => void;
  readonly reject: (err: unknown) => void;
}

/**
 * The sends of idempotent kafkajs producers, one at a time. kafkajs rolls a producer's sequence
 * numbers back when a produce request fails, also one whose answer was lost after the broker took
 * it, and waits before retrying: a send of the same producer that goes out meanwhile takes those
 * numbers, the broker drops it as that batch's duplicate (reported written), and the retry is then
 * written as new. Measured: of two concurrent publishes of 50, one lost its answer; the other's 50
 * were missing and the first's written twice. Sends queued while one is under way go out together
 * in the next (one produce request), so concurrent small publishes keep most of their throughput.
 */
export class SerialSends {
  private queue: Waiting[] = [];
  private running = false;
  private readonly failed = new WeakSet<Producer>();

  /** `onFailure`: the producer failed a send and must not be used again (replace it). */
  constructor(private readonly onFailure: (producer: Producer) => void) {}

  /** Rejects with ProducerReplaced when `producer` failed an earlier send before this one went out. */
  send(producer: Producer, messages: readonly OutgoingMessage[]): Promise<void> {
    if (this.failed.has(producer)) return Promise.reject(new ProducerReplaced());
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ producer, messages, resolve, reject });
      if (!this.running) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.running = true;
    try {
      for (let first = this.queue[0]; first !== undefined; first = this.queue[0]) {
        const producer = first.producer;
        const group = this.queue.filter((w) => w.producer === producer);
        this.queue = this.queue.filter((w) => w.producer !== producer);
        if (this.failed.has(producer)) {
          for (const w of group) w.reject(new ProducerReplaced());
          continue;
        }
        // A send is done once its last message went out, so a failure of a later chunk leaves it
        // done rather than to be published (and written) again.
        const tagged = group.flatMap((w) => w.messages.map((m, i) => ({ ...m, last: i === w.messages.length - 1 ? w : undefined })));
        const open = new Set(group.filter((w) => w.messages.length > 0));
        for (const w of group) if (w.messages.length === 0) w.resolve();
        try {
          for (const chunk of chunkByBytes(tagged)) {
            await producer.sendBatch({ topicMessages: groupByTopic(chunk), acks: -1 });
            for (const m of chunk) {
              if (m.last === undefined) continue;
              open.delete(m.last);
              m.last.resolve();
            }
          }
        } catch (err) {
          this.failed.add(producer);
          this.onFailure(producer);
          for (const w of open) w.reject(err);
        }
      }
    } finally {
      this.running = false;
    }
  }
}
