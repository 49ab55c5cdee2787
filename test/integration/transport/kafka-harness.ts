// Broker-side helpers for the Kafka transport tests (real broker from the test services).
import { KafkaDeadLetters } from '../../../src/transport/kafka/kafka-dead-letters.ts';
import { Kafka, logLevel } from 'kafkajs';
import { KafkaSettingsSchema, type KafkaSettings } from '../../../src/contracts/fleet-config.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { KafkaTransport, type KafkaTransportOptions } from '../../../src/transport/kafka/kafka-transport.ts';
import { HEADERS } from '../../../src/transport/names.ts';
import type { Transport } from '../../../src/transport/transport.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import type { ConformanceHarness, DlqEntry } from './conformance-kit.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';

export function kafkaSettings(overrides: Partial<KafkaSettings> = {}): KafkaSettings {
  return KafkaSettingsSchema.parse({
    brokers: getServices().kafkaBrokers,
    clientId: 'conf',
    groupId: uniqueName('conf-group'),
    sessionTimeoutMs: 10_000,
    ...overrides,
  });
}

export function adminKafka(): Kafka {
  return new Kafka({ clientId: 'conf-admin', brokers: getServices().kafkaBrokers, logLevel: logLevel.NOTHING });
}

/** The group's committed offset on partition 0 of `topic` (-1: none). */
export async function committed(groupId: string, topic: string): Promise<number> {
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    const [t] = await admin.fetchOffsets({ groupId, topics: [topic] });
    return Number(t?.partitions[0]?.offset ?? -1);
  } finally {
    await admin.disconnect();
  }
}

/** Reads a topic from the beginning until `count` messages arrived (or the time is up). */
export async function readTopic(
  topic: string,
  count: number,
  timeoutMs: number,
): Promise<Array<{ key: string | undefined; value: Buffer; headers: Record<string, string> }>> {
  const kafka = adminKafka();
  const consumer = kafka.consumer({ groupId: uniqueName('reader'), maxWaitTimeInMs: 100 });
  const out: Array<{ key: string | undefined; value: Buffer; headers: Record<string, string> }> = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => {
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(message.headers ?? {})) headers[k] = String(v);
        out.push({ key: message.key?.toString(), value: message.value ?? Buffer.alloc(0), headers });
      },
    });
    const deadline = Date.now() + timeoutMs;
    while (out.length < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  } finally {
    await consumer.disconnect();
  }
  return out;
}

export async function kafkaHarness(transportOptions: KafkaTransportOptions = {}): Promise<ConformanceHarness> {
  const settings = kafkaSettings();
  // A topic whose size limit no result fits in: the broker refuses the write (MESSAGE_TOO_LARGE).
  const unpublishable = uniqueName('conf-unpublishable');
  const admin = adminKafka().admin();
  await admin.connect();
  await createTopicsSettled(admin, [{ topic: unpublishable, numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: '64' }] }]);
  await admin.disconnect();
  return {
    name: 'kafka',
    createTransport: () => new KafkaTransport(settings, { partitions: 2, retries: 1, ...transportOptions }),
    createProducer: () => new KafkaProducer(settings, { partitions: 2 }),
    createDeadLetters: () => new KafkaDeadLetters(settings),
    deadLettersStay: true,
    crash: (t: Transport) => (t as KafkaTransport).abort(),
    async readDlq(model, count, timeoutMs): Promise<DlqEntry[]> {
      const msgs = await readTopic(`${model}.dlq`, count, timeoutMs);
      return msgs.map((m) => ({ reason: m.headers[HEADERS.dlqReason] ?? '', message: m.headers[HEADERS.dlqMessage] ?? '', body: new Uint8Array(m.value) }));
    },
    unpublishableReplyTo: unpublishable,
    garbage: new Uint8Array([0xde, 0xad, 0xbe, 0xef, 0x00, 0x01]),
    redeliveryTimeoutMs: 30_000,
    exactRedelivery: false,
    redeliveredFlag: false,
    cleanup: async () => {},
  };
}
