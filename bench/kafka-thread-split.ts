/**
 * What moving kafkajs off the main thread would buy (issue 5's Kafka ratio, analysis bench).
 * kafkajs consumes and produces in a worker thread; the main thread decodes each request, spends
 * a fixed number of µs of CPU on it (standing in for the worker's own per-request work: validation,
 * scheduling, gather/scatter, result build, metrics), encodes a reply and hands it back. Each
 * round runs the raw kafkajs echo (one thread, the issue's ceiling) and the split echo side by
 * side and prints their ratio, for several per-request costs. The pipeline's own work is
 * ≈ 22 µs + ≈ 6 µs GC per request (bench/README.md): the row nearest that is what a thread-split
 * KafkaTransport could reach on this machine.
 *
 * Run: npx tsx bench/kafka-thread-split.ts [--costs 0,10,20] [--rounds 3] [--messages 40000]
 */
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { Worker } from 'node:worker_threads';
import { Kafka, logLevel } from 'kafkajs';
import { decodeRequest, encodeRequest } from '../src/codec/index.ts';
import { defaultRequest, kafkaRawEcho, topicSize, until, watchdog, withBenchServices } from './transport-echo.ts';

const { values: args } = parseArgs({
  options: { costs: { type: 'string', default: '0,10,20' }, rounds: { type: 'string', default: '3' }, messages: { type: 'string', default: '40000' } },
});
const costsUs = args.costs.split(',').map(Number);
const rounds = Number(args.rounds);
const messages = Number(args.messages);
if (costsUs.some((c) => !Number.isFinite(c) || c < 0) || !(rounds >= 1) || !(messages >= 1000)) {
  throw new Error('usage: --costs a list of µs >= 0 (e.g. 0,10,20), --rounds >= 1, --messages >= 1000');
}

function spin(us: number): void {
  const until = performance.now() + us / 1000;
  while (performance.now() < until) {
    // CPU the main thread would spend on one request
  }
}

async function splitEcho(brokers: string[], costUs: number): Promise<number> {
  const input = `split${randomUUID().slice(0, 8)}.in`;
  const output = `${input}.out`;
  const kafka = new Kafka({ clientId: 'split-bench', brokers, logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [input, output].map((topic) => ({ topic, numPartitions: 4 })), waitForLeaders: true });
  await admin.disconnect();
  const producer = kafka.producer();
  await producer.connect();
  for (let i = 0; i < messages; i += 1_000) {
    const batch = Array.from({ length: Math.min(1_000, messages - i) }, (_, k) => ({ key: `e${i + k}`, value: encodeRequest(defaultRequest('m', i + k)) }));
    await producer.sendBatch({ topicMessages: [{ topic: input, messages: batch }], acks: -1 });
  }
  await producer.disconnect();
  const worker = new Worker(new URL('./kafka-thread-split-worker.mjs', import.meta.url), { workerData: { input, output, brokers } });
  let startedAt = 0;
  let failure: string | undefined;
  worker.on('error', (err) => (failure = String(err)));
  worker.on('message', (m: { batch: number; buf: ArrayBuffer; ends: number[] } | { error: string }) => {
    if ('error' in m) {
      failure = m.error;
      return;
    }
    if (startedAt === 0) startedAt = performance.now();
    const src = new Uint8Array(m.buf);
    const replies: Uint8Array[] = [];
    let start = 0;
    for (const end of m.ends) {
      const request = decodeRequest(src.subarray(start, end));
      start = end;
      spin(costUs);
      replies.push(encodeRequest(request));
    }
    const out = new Uint8Array(replies.reduce((n, r) => n + r.byteLength, 0));
    const ends: number[] = [];
    let o = 0;
    for (const r of replies) {
      out.set(r, o);
      o += r.byteLength;
      ends.push(o);
    }
    worker.postMessage({ batch: m.batch, buf: out.buffer, ends }, [out.buffer]);
  });
  try {
    await until(async () => {
      if (failure !== undefined) throw new Error(`split echo failed: ${failure}`);
      return (await topicSize(kafka, output)) >= messages;
    }, 300_000, 'split echo');
    return messages / ((performance.now() - startedAt) / 1000);
  } finally {
    await worker.terminate();
  }
}

await withBenchServices(async ({ kafkaBrokers }) => {
  console.log(`kafka thread split: ${messages} messages, 4 partitions, ${rounds} round(s) per cost; ratio = split / raw kafkajs echo of the same round`);
  for (const costUs of costsUs) {
    const ratios: number[] = [];
    for (let round = 1; round <= rounds; round += 1) {
      process.stderr.write(`  cost ${costUs} µs, round ${round}/${rounds}…\n`);
      const raw = await watchdog('raw echo', kafkaRawEcho(kafkaBrokers, { messages }));
      const split = await watchdog('split echo', splitEcho(kafkaBrokers, costUs));
      ratios.push(split / raw.msgsPerSec);
      console.log(`  + ${costUs} µs/request on the main thread: raw ${Math.round(raw.msgsPerSec)} msg/s, split ${Math.round(split)} msg/s, ratio ${(split / raw.msgsPerSec).toFixed(2)}`);
    }
    const sorted = [...ratios].sort((a, b) => a - b);
    console.log(`  => cost ${costUs} µs: median ratio ${(sorted[Math.floor(sorted.length / 2)] ?? 0).toFixed(2)}`);
  }
});
