/**
 * Pipeline vs transport ceiling (issue 5): end-to-end throughput of the whole worker pipeline
 * (decode → scheduler → gather → simulated device → scatter → publish → ack) through Kafka and
 * through BullMQ with a near-zero-cost model, as a ratio to that transport's own echo ceiling
 * (kafkajs consume→produce; BullMQ process→add), measured side by side in one run. Target >= 0.7.
 * Both start from a pre-published backlog and stop at the last reply.
 * Run: npx tsx bench/pipeline-transport-bench.ts [--messages N]
 */
import { randomUUID } from 'node:crypto';
import { parseFleetConfig } from '../src/contracts/config-loader.ts';
import type { TransportSettings } from '../src/contracts/fleet-config.ts';
import type { RequestEnvelope } from '../src/contracts/request-envelope.ts';
import { openDevice } from '../src/device/index.ts';
import { createLogger } from '../src/observability/logger.ts';
import { createProducer } from '../src/producer/index.ts';
import { runWorker, type RunningWorker } from '../src/runtime/worker-process.ts';
import type { Transport } from '../src/transport/index.ts';
import { transportFor } from '../src/cli/worker-deps.ts';
import { bullmqRawEcho, kafkaRawEcho, withBenchServices } from './transport-echo.ts';

process.env.NPU_FLEET_DEVICE = 'sim';
const argIndex = process.argv.indexOf('--messages');
const N = argIndex > 0 ? Number(process.argv[argIndex + 1]) : 20_000;
const MODEL = 'mlp-classifier';
const log = createLogger({ level: 'warn' });

/** A near-zero-cost request: one sample of the MLP (64 floats). */
function request(i: number, replyTo: string): RequestEnvelope {
  const data = new Uint8Array(64 * 4);
  new DataView(data.buffer).setFloat32(0, i % 7, true);
  return { id: `p-${i}`, model: MODEL, priority: Number(process.env.BENCH_PRIORITY ?? 1), createdAt: Date.now(), replyTo, inputs: [{ name: 'input', dtype: 'float32', shape: [1, 64], data }] };
}

async function pipeline(transport: TransportSettings, messages: number): Promise<{ msgsPerSec: number; seconds: number }> {
  const replyTo = `bench-replies-${randomUUID().slice(0, 8)}`;
  const producer = createProducer(transport, {});
  let received = 0;
  let target = 0;
  let done: () => void = () => {};
  const sub = await producer.subscribeReplies(replyTo, () => {
    if (++received === target) done();
  });
  const roundTrip = async (count: number, offset: number): Promise<void> => {
    target = received + count;
    const finished = new Promise<void>((r) => (done = r));
    for (let i = 0; i < count; i += 1000) {
      await producer.publish(Array.from({ length: Math.min(1000, count - i) }, (_, k) => request(offset + i + k, replyTo)));
    }
    await finished;
  };
  const config = parseFleetConfig({ transport, devices: { count: 2, backend: 'sim' }, models: [MODEL], worker: { metricsPort: 0 }, log: { level: 'warn' } });
  const workers: RunningWorker[] = [];
  const transports: Transport[] = [];
  for (const deviceId of [0, 1]) {
    const create = (c: typeof config): Transport => {
      const t = transportFor(c, log);
      transports.push(t);
      return t;
    };
    workers.push(await runWorker(config, deviceId, { artifact: 'onnx', openDevice, createTransport: create }, { log, metricsPort: 0 }));
  }
  // Warm-up: group joined, topics known, code hot. Then, like the echo, start from a backlog:
  // pause intake, publish everything, resume and time until the last reply.
  await roundTrip(2000, 1_000_000);
  for (const t of transports) t.pause(MODEL, [0, 1, 2]);
  await new Promise((r) => setTimeout(r, 300));
  target = received + messages;
  const finished = new Promise<void>((r) => (done = r));
  for (let i = 0; i < messages; i += 1000) {
    await producer.publish(Array.from({ length: Math.min(1000, messages - i) }, (_, k) => request(i + k, replyTo)));
  }
  const t0 = performance.now();
  for (const t of transports) t.resume(MODEL, [0, 1, 2]);
  await finished;
  const seconds = (performance.now() - t0) / 1000;
  for (const w of workers) await w.stop();
  await sub.close();
  await producer.close();
  return { msgsPerSec: messages / seconds, seconds };
}

await withBenchServices(async ({ kafkaBrokers, redisUrl }) => {
  console.log(`pipeline vs transport echo ceiling: ${N} messages, model ${MODEL} (near-zero cost), 2 simulated devices`);
  const tag = randomUUID().slice(0, 8);
  const kafka = parseFleetConfig({
    transport: { kind: 'kafka', kafka: { brokers: kafkaBrokers, groupId: `bench-${tag}`, topicTemplate: `bench-${tag}.{model}.requests.p{priority}`, repliesTemplate: `bench-${tag}.{model}.replies`, dlqTemplate: `bench-${tag}.{model}.dlq` } },
  }).transport;
  const bull = parseFleetConfig({ transport: { kind: 'bullmq', bullmq: { redisUrl, prefix: `bench-${tag}` } } }).transport;
  const rows: Array<[string, number, number]> = [];
  const kCeil = await kafkaRawEcho(kafkaBrokers, { messages: N });
  const kPipe = await pipeline(kafka, N);
  rows.push(['kafka', kCeil.msgsPerSec, kPipe.msgsPerSec]);
  const bCeil = await bullmqRawEcho(redisUrl, { messages: Math.min(N, 10_000) });
  const bPipe = await pipeline(bull, Math.min(N, 10_000));
  rows.push(['bullmq', bCeil.msgsPerSec, bPipe.msgsPerSec]);
  for (const [name, ceiling, pipe] of rows) {
    const ratio = pipe / ceiling;
    console.log(`${name.padEnd(7)} echo ceiling ${ceiling.toFixed(0).padStart(7)} msg/s | full pipeline ${pipe.toFixed(0).padStart(7)} req/s | ratio ${ratio.toFixed(2)} (target >= 0.7) ${ratio >= 0.7 ? 'PASS' : 'MISS'}`);
  }
});
process.exit(0);
