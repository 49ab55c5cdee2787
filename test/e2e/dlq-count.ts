// Counts records in a model's dead-letter topic/queue, straight from the broker.
import { Queue } from 'bullmq';
import { Kafka, logLevel } from 'kafkajs';
import type { TransportSettings } from '../../src/contracts/fleet-config.ts';
import { whileLeadershipSettles } from '../../src/transport/kafka/leader-retry.ts';
import { renderName } from '../../src/transport/names.ts';

/** Records in a Kafka topic (0 if it does not exist), from its partitions' watermarks. */
export async function kafkaTopicRecords(brokers: string[], topic: string): Promise<number> {
  const admin = new Kafka({ brokers, logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  try {
    const topics = await admin.listTopics();
    if (!topics.includes(topic)) return 0;
    // A DLQ topic a worker made a moment ago may not have its leader yet.
    const offsets = await whileLeadershipSettles(() => admin.fetchTopicOffsets(topic));
    return offsets.reduce((n, p) => n + Number(p.high) - Number(p.low), 0);
  } finally {
    await admin.disconnect();
  }
}

export async function dlqCount(transport: TransportSettings, model: string): Promise<number> {
  if (transport.kind === 'kafka') return kafkaTopicRecords(transport.kafka.brokers, renderName(transport.kafka.dlqTemplate, model));
  if (transport.kind === 'bullmq') {
    const name = renderName(transport.bullmq.dlqTemplate, model);
    const url = new URL(transport.bullmq.redisUrl);
    const queue = new Queue(name, { prefix: transport.bullmq.prefix, connection: { host: url.hostname, port: Number(url.port) } });
    try {
      const counts = await queue.getJobCounts('waiting', 'prioritized', 'completed', 'failed', 'delayed', 'active');
      return Object.values(counts).reduce((a, b) => a + b, 0);
    } finally {
      await queue.close();
    }
  }
  return 0;
}
