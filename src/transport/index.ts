import type { TransportSettings } from '../contracts/fleet-config.ts';
import type { CodecLimits } from '../contracts/limits.ts';
import { BullmqTransport, type BullmqTransportOptions } from './bullmq/bullmq-transport.ts';
import type { TransportLogger } from './kafka/kafka-client.ts';
import { KafkaTransport, type KafkaTransportOptions } from './kafka/kafka-transport.ts';
import type { MemoryBroker } from './memory/memory-broker.ts';
import { MemoryTransport } from './memory/memory-transport.ts';
import type { Transport } from './transport.ts';

export type { Delivery, DlqRecord, ModelSubscription, Outcome, Transport, TransportStartOptions } from './transport.ts';
export type { TransportLogger } from './kafka/kafka-client.ts';
export { KafkaTransport, type KafkaTransportOptions } from './kafka/kafka-transport.ts';
export { BullmqTransport, type BullmqTransportOptions } from './bullmq/bullmq-transport.ts';
export { MemoryTransport, type MemoryTransportOptions } from './memory/memory-transport.ts';
export { MemoryBroker, sharedMemoryBroker } from './memory/memory-broker.ts';

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
