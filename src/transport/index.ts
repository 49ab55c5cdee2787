/**
 * Transports (DESIGN §3): createTransport() for workers, see src/producer for the client side.
 *
 * Contract the runtime relies on (all three transports, checked by
 * test/integration/transport/conformance.ts):
 * - start() resolves once intake runs (Kafka: group joined). onDeliveries is called on the event
 *   loop with batches; it must not block or throw. Deliveries of one model arrive in priority
 *   order where the broker can (memory, BullMQ); Kafka delivers topics concurrently, so order by
 *   Delivery.priority locally.
 * - settle(outcomes): publishes each result (to replyTo, else the model's reply topic/queue) and
 *   DLQ record (original bytes/job data + reason), and only then acknowledges. Call it once per
 *   delivery; a second settle of a settled delivery rejects with INVALID_ARGUMENT. If settle
 *   rejects (TRANSPORT_ERROR), call it again with the same outcomes: deliveries it already
 *   finished are skipped, the rest are retried. A replyTo the broker cannot name (Kafka: not
 *   [A-Za-z0-9._-]; BullMQ: contains ':') sends the request to the DLQ (INVALID_ARGUMENT).
 *   Kafka: the offset commit covers the contiguous settled prefix per partition, so a delivery
 *   behind an unsettled one is acked when the gap closes. Kafka exactlyOnce: settle resolves
 *   when results + offsets are committed in one transaction, which waits for earlier offsets of
 *   the same partition (never make progress depend on a settle resolving).
 *   BullMQ: resolves when the job is completed with the result JSON as its return value.
 * - release(deliveries): give back unprocessed work. Memory/BullMQ: back to the head of its
 *   priority now (redelivered: true). Kafka: left uncommitted; it comes back after the next
 *   rebalance/restart (release is meant for shutdown; commits never pass a released offset).
 * - pause/resume(model, priorities): per priority on every transport (Kafka: the priority's
 *   topic; BullMQ: jobs of a paused priority fetched anyway are put back and fetching rests
 *   200 ms; memory: lanes). Pausing all priorities stops fetching entirely.
 * - stopIntake(): no new deliveries; settle/release keep working. close(): stopIntake, waits
 *   for settles in flight, gives back every delivery still open (as release), disconnects;
 *   settle afterwards rejects with CLOSED.
 * - Delivery.redelivered: memory/BullMQ exact; Kafka best effort (the highest offset delivered
 *   rides along as commit metadata; work received after a dead worker's last commit looks new).
 * - onAnswered(model, reason): the transport answered a request itself, with a failed result and a
 *   DLQ record (BullMQ only: jobs BullMQ gave up on after their workers died holding them).
 * - sourceLag(): Kafka: high watermark minus committed offset, summed over a model's topics;
 *   BullMQ: waiting + prioritized jobs; memory: queued messages.
 */
import type { TransportSettings } from '../contracts/fleet-config.ts';
import type { CodecLimits } from '../contracts/limits.ts';
import { BullmqTransport, type BullmqTransportOptions } from './bullmq/bullmq-transport.ts';
import type { TransportLogger } from './kafka/kafka-client.ts';
import { KafkaTransport, type KafkaTransportOptions } from './kafka/kafka-transport.ts';
import type { MemoryBroker } from './memory/memory-broker.ts';
import { MemoryTransport } from './memory/memory-transport.ts';
import type { Transport } from './transport.ts';
import type { DeadLetters } from './dead-letters.ts';
import { BullmqDeadLetters } from './bullmq/bullmq-dead-letters.ts';
import { KafkaDeadLetters } from './kafka/kafka-dead-letters.ts';
import { MemoryDeadLetters } from './memory/memory-dead-letters.ts';
import { sharedMemoryBroker } from './memory/memory-broker.ts';

export type { Delivery, DlqRecord, ModelSubscription, Outcome, Transport, TransportStartOptions } from './transport.ts';
export type { TransportLogger } from './kafka/kafka-client.ts';
export { KafkaTransport, type KafkaTransportOptions } from './kafka/kafka-transport.ts';
export { BullmqTransport, type BullmqTransportOptions } from './bullmq/bullmq-transport.ts';
export { MemoryTransport, type MemoryTransportOptions } from './memory/memory-transport.ts';
export { MemoryBroker, sharedMemoryBroker } from './memory/memory-broker.ts';
export type { DeadLetter, DeadLetterListing, DeadLetterQuery, DeadLetters, ReplayOptions, ReplayReport } from './dead-letters.ts';
export { BullmqDeadLetters } from './bullmq/bullmq-dead-letters.ts';
export { KafkaDeadLetters } from './kafka/kafka-dead-letters.ts';
export { MemoryDeadLetters } from './memory/memory-dead-letters.ts';

export interface CreateTransportOptions {
  /** pino logger (or anything with error/warn/info/debug(obj, msg)). */
  readonly log?: TransportLogger;
  /** Accepted for symmetry with the producer; decoding (and its limits) is the runtime's job. */
  readonly limits?: CodecLimits;
  /** Memory transport: the broker to attach to (default: the process-wide one). */
  readonly memoryBroker?: MemoryBroker;
  /** Memory transport: most unsettled deliveries per model. */
  readonly prefetch?: number;
  /** Kafka-only tuning (partitions, fetch wait, in-flight bounds, transactional instance id). */
  readonly kafka?: Omit<KafkaTransportOptions, 'logger'>;
  /** BullMQ-only tuning (prefetch, stalled interval, max stalled count). */
  readonly bullmq?: Omit<BullmqTransportOptions, 'logger'>;
}

/** The transport a worker consumes from, chosen by `config.transport.kind`. */
export function createTransport(settings: TransportSettings, options: CreateTransportOptions = {}): Transport {
  switch (settings.kind) {
    case 'memory':
      return new MemoryTransport({
        ...(options.memoryBroker === undefined ? {} : { broker: options.memoryBroker }),
        ...(options.prefetch === undefined ? {} : { prefetch: options.prefetch }),
      });
    case 'kafka':
      return new KafkaTransport(settings.kafka, { ...options.kafka, ...(options.log === undefined ? {} : { logger: options.log }) });
    case 'bullmq':
      return new BullmqTransport(settings.bullmq, { ...options.bullmq, ...(options.log === undefined ? {} : { logger: options.log }) });
  }
}

/** A model's dead-letter topic/queue, to list and replay (`npu-fleet dlq`). */
export function openDeadLetters(settings: TransportSettings, options: Pick<CreateTransportOptions, 'log' | 'memoryBroker'> = {}): DeadLetters {
  switch (settings.kind) {
    case 'memory':
      return new MemoryDeadLetters(options.memoryBroker ?? sharedMemoryBroker());
    case 'kafka':
      return new KafkaDeadLetters(settings.kafka, options.log);
    case 'bullmq':
      return new BullmqDeadLetters(settings.bullmq);
  }
}
