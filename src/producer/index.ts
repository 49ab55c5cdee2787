import type { TransportSettings } from '../contracts/fleet-config.ts';
import { BullmqProducer } from './bullmq-producer.ts';
import type { TransportLogger } from '../transport/kafka/kafka-client.ts';
import type { MemoryBroker } from '../transport/memory/memory-broker.ts';
import { KafkaProducer } from './kafka-producer.ts';
import { MemoryProducer } from './memory-producer.ts';
import type { Producer, ProducerOptions } from './producer.ts';

export type * from './producer.ts';
export type { RequestEnvelope } from '../contracts/request-envelope.ts';
export type { ResultEnvelope, ResultStatus } from '../contracts/result-envelope.ts';
export type { Dtype, Tensor } from '../contracts/tensor.ts';
export type { FleetConfig, TransportSettings } from '../contracts/fleet-config.ts';
export { loadFleetConfig, parseFleetConfig } from '../contracts/config-loader.ts';
export { FleetError, type ErrorCode } from '../errors/fleet-error.ts';
/**
 * tensorView(dtype, data): a typed array over a tensor's bytes (`Float32Array` for float32,
 * `Int32Array`, `BigInt64Array` for int64, `Int8Array`, `Uint16Array` bit patterns for float16,
 * `Uint8Array` for uint8 and bool), e.g. `tensorView('float32', result.outputs[0].data)`. Use it
 * rather than `new Float32Array(data.buffer)`: `data` is a Buffer on Kafka (a slice of a larger,
 * often pooled, buffer at any offset) and a Uint8Array on BullMQ and memory, so `.buffer` holds
 * other bytes too. Zero-copy when the bytes are aligned for the element size, else one copy; a
 * view shares the result's memory. bytesOf(typedArray): the reverse, tensor bytes without a copy.
 */
export { bytesOf, tensorView } from '../contracts/tensor.ts';
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
