import type { TransportSettings } from '../contracts/fleet-config.ts';
import { BullmqProducer } from './bullmq-producer.ts';
import type { TransportLogger } from '../transport/kafka/kafka-client.ts';
import type { MemoryBroker } from '../transport/memory/memory-broker.ts';
import { KafkaProducer } from './kafka-producer.ts';
import { MemoryProducer } from './memory-producer.ts';
import type { Producer, ProducerOptions } from './producer.ts';

export type * from './producer.ts';
export { BullmqProducer } from './bullmq-producer.ts';
export { KafkaProducer } from './kafka-producer.ts';
export { MemoryProducer } from './memory-producer.ts';
export { ReplyRouter } from './reply-router.ts';

export interface CreateProducerOptions extends ProducerOptions {
  readonly log?: TransportLogger;
  /** Memory: the broker the workers use (default: the process-wide one). */
  readonly memoryBroker?: MemoryBroker;
  /** Kafka: partitions of request topics the producer creates when missing. */
  readonly partitions?: number;
  /** Kafka: an idempotent producer (default true; see KafkaProducerOptions.idempotent). */
  readonly idempotent?: boolean;
}

/** The producer client for `config.transport` (same settings the workers use). */
export function createProducer(settings: TransportSettings, options: CreateProducerOptions = {}): Producer {
  const { log, memoryBroker, partitions, idempotent, ...common } = options;
  switch (settings.kind) {
    case 'memory':
      return new MemoryProducer({ ...common, ...(memoryBroker === undefined ? {} : { broker: memoryBroker }) });
    case 'kafka':
      return new KafkaProducer(settings.kafka, {
        ...common,
        ...(log === undefined ? {} : { logger: log }),
        ...(partitions === undefined ? {} : { partitions }),
        ...(idempotent === undefined ? {} : { idempotent }),
      });
    case 'bullmq':
      return new BullmqProducer(settings.bullmq, { ...common, ...(log === undefined ? {} : { logger: log }) });
  }
}
