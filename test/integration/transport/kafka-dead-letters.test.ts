import type { IHeaders } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import { KafkaDeadLetters } from '../../../src/transport/kafka/kafka-dead-letters.ts';
import { HEADERS } from '../../../src/transport/names.ts';
import { uniqueName } from '../../helpers/services.ts';
import { adminKafka, kafkaSettings } from './kafka-harness.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((x) => x.close()));
});

/** Fresh names, a DLQ topic and the model's request topics (one partition each unless told). */
async function setup(partitions = 1): Promise<{ model: string; tag: string; dlq: string; source: (p: number) => string; dl: KafkaDeadLetters }> {
  const tag = uniqueName('kdl').replace(/[^A-Za-z0-9-]/g, '');
  const model = 'm';
  const settings = kafkaSettings({ topicTemplate: `${tag}.{model}.requests.p{priority}`, repliesTemplate: `${tag}.{model}.replies`, dlqTemplate: `${tag}.{model}.dlq` });
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    await admin.createTopics({
      topics: [`${tag}.m.dlq`, `${tag}.m.requests.p0`, `${tag}.m.requests.p1`].map((topic) => ({ topic, numPartitions: partitions })),
      waitForLeaders: true,
    });
  } finally {
    await admin.disconnect();
  }
  const dl = new KafkaDeadLetters(settings);
  open.push(dl);
  return { model, tag, dlq: `${tag}.m.dlq`, source: (p) => `${tag}.m.requests.p${p}`, dl };
}

/** A DLQ record as the transport writes it: the original key, value and headers plus the DLQ's. */
const record = (source: string, n: number, extra: IHeaders = {}): { key: string; value: Buffer; headers: IHeaders; partition?: number } => ({
  key: `k${n}`,
  value: Buffer.from(`garbage-${n}`),
  headers: { ...extra, [HEADERS.dlqReason]: 'UNKNOWN_MODEL', [HEADERS.dlqMessage]: 'not served', [HEADERS.dlqSource]: `${source}/0/${n}` },
});

async function writeDlq(topic: string, messages: ReturnType<typeof record>[]): Promise<void> {
  const producer = adminKafka().producer();
  await producer.connect();
  try {
    await producer.send({ topic, messages, acks: -1 });
  } finally {
    await producer.disconnect();
  }
}

/** Every message of `topic` as of now (raw headers), read from the beginning. */
async function readAll(topic: string): Promise<Array<{ key: Buffer | null; value: Buffer | null; headers: IHeaders }>> {
  const kafka = adminKafka();
  const admin = kafka.admin();
  await admin.connect();
  const total = (await admin.fetchTopicOffsets(topic)).reduce((n, p) => n + Number(p.high) - Number(p.low), 0);
  await admin.disconnect();
  const out: Array<{ key: Buffer | null; value: Buffer | null; headers: IHeaders }> = [];
  if (total === 0) return out;
  const consumer = kafka.consumer({ groupId: uniqueName('kdl-reader'), maxWaitTimeInMs: 100 });
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({ eachMessage: async ({ message }) => void out.push({ key: message.key, value: message.value, headers: message.headers ?? {} }) });
    const deadline = Date.now() + 30_000;
    while (out.length < total && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  } finally {
    await consumer.disconnect();
  }
  return out;
}

describe('KafkaDeadLetters', () => {
  it('replay --limit N re-sends N records, also when they arrive in one fetch batch', async () => {
    const { model, dlq, source, dl } = await setup();
    await writeDlq(dlq, [1, 2, 3, 4, 5].map((n) => record(source(1), n)));
    const report = await dl.replay({ model, limit: 2 });
    expect(report.replayed).toBe(2);
    const sent = await readAll(source(1));
    expect(sent.map((m) => m.value?.toString())).toEqual(['garbage-1', 'garbage-2']);
  }, 90_000);
});
