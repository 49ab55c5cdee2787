// The kafkajs side of bench/kafka-thread-split.ts, run in a worker thread (plain JS: worker
// threads do not inherit tsx's loader). It consumes, hands each fetched batch to the main thread
// as one transferred buffer, and publishes + commits what the main thread sends back, without
// waiting for it in eachBatch (as KafkaTransport never waits for the device).
import { parentPort, workerData } from 'node:worker_threads';
import kafkajs from 'kafkajs';

const { Kafka, logLevel } = kafkajs;
const { input, output, brokers } = workerData;
const kafka = new Kafka({ clientId: 'split', brokers, logLevel: logLevel.NOTHING });
const producer = kafka.producer();
const consumer = kafka.consumer({ groupId: `${input}.g`, maxWaitTimeInMs: 100 });
/** batch id → where to commit and the keys to publish with */
const pending = new Map();
let nextId = 0;

parentPort.on('message', (m) => {
  const p = pending.get(m.batch);
  pending.delete(m.batch);
  const src = Buffer.from(m.buf);
  let start = 0;
  const messages = m.ends.map((end, i) => {
    const value = src.subarray(start, end);
    start = end;
    return { key: p.keys[i] ?? null, value };
  });
  producer
    .sendBatch({ topicMessages: [{ topic: output, messages }], acks: -1 })
    .then(() => consumer.commitOffsets([{ topic: p.topic, partition: p.partition, offset: p.next }]))
    .catch((err) => parentPort.postMessage({ error: String(err) }));
});

await producer.connect();
await consumer.connect();
await consumer.subscribe({ topics: [input], fromBeginning: true });
await consumer.run({
  autoCommit: false,
  eachBatch: async ({ batch }) => {
    const total = batch.messages.reduce((n, x) => n + (x.value?.byteLength ?? 0), 0);
    const out = new Uint8Array(total);
    const ends = [];
    let o = 0;
    for (const x of batch.messages) {
      if (x.value) out.set(x.value, o);
      o += x.value?.byteLength ?? 0;
      ends.push(o);
    }
    const id = nextId++;
    pending.set(id, { topic: batch.topic, partition: batch.partition, next: String(Number(batch.lastOffset()) + 1), keys: batch.messages.map((x) => x.key) });
    parentPort.postMessage({ batch: id, buf: out.buffer, ends }, [out.buffer]);
  },
});
