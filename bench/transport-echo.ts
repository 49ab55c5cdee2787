/**
 * Transport echo ceilings (issue 5): how many messages per second each broker client can move
 * consume → produce with no work in between, measured side by side in one run.
 *   - kafka raw:        kafkajs eachBatch → sendBatch(acks=all) → commitOffsets      (the ceiling)
 *   - kafka transport:  KafkaTransport deliveries → settle() immediately (decode + result encode)
 *   - bullmq raw:       BullMQ Worker processor → Queue.add on a reply queue         (the ceiling)
 *   - bullmq transport: BullmqTransport deliveries → settle() immediately
 *   - memory transport: MemoryTransport deliveries → settle() immediately (reference)
 * Each run starts from a pre-published backlog and ends when the last reply is durably published
 * (Kafka: high watermarks of the reply topic; BullMQ: reply queue count). The runtime's pipeline
 * bench imports these functions and reports its throughput as a ratio to the matching ceiling.
 *
 * Run: npx tsx bench/transport-echo.ts [--messages N]   (KAFKA_BROKERS / REDIS_URL, else local servers)
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Queue, Worker } from 'bullmq';
import { Kafka, logLevel } from 'kafkajs';
import { decodeRequest, encodeRequest, requestFromJson, requestToJson } from '../src/codec/index.ts';
import { BullmqSettingsSchema, KafkaSettingsSchema } from '../src/contracts/fleet-config.ts';
import type { RequestEnvelope } from '../src/contracts/request-envelope.ts';
import { ZERO_TIMINGS, type ResultEnvelope } from '../src/contracts/result-envelope.ts';
import { createProducer } from '../src/producer/index.ts';
import { BullmqTransport } from '../src/transport/bullmq/bullmq-transport.ts';
import { KafkaTransport, type KafkaTransportOptions } from '../src/transport/kafka/kafka-transport.ts';
import { MemoryBroker } from '../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../src/transport/memory/memory-transport.ts';
import type { Delivery, Outcome, Transport } from '../src/transport/transport.ts';
import type { CpuMeter, CpuUse } from './cpu-use.ts';
import { startProfile } from './window-profile.ts';

export interface EchoOptions {
  readonly messages?: number;
  /** Request shape (default: one float32 [1,16] input, like a near-zero-cost model). */
  readonly makeRequest?: (model: string, i: number) => RequestEnvelope;
  /** Kafka partitions per topic. */
  readonly partitions?: number;
  /** BullMQ raw echo worker concurrency. */
  readonly concurrency?: number;
  /**
   * BullMQ job options on the echo's input jobs and on the jobs it adds (default none: Redis keeps
   * every job). The pipeline bench passes the fleet's own retention so both move the same jobs.
   */
  readonly jobOptions?: Readonly<Record<string, unknown>>;
  /** KafkaTransport tuning for the transport echo. */
  readonly kafkaTransport?: KafkaTransportOptions;
  /** Measures CPU per message over the raw echoes' timed window (from consumer start). */
  readonly cpu?: CpuMeter;
}

export interface EchoResult {
  readonly name: string;
  readonly messages: number;
  readonly seconds: number;
  readonly msgsPerSec: number;
  readonly cpu?: CpuUse;
}

export function defaultRequest(model: string, i: number): RequestEnvelope {
  const data = new Float32Array(16).fill(i % 7);
  return {
    id: `echo-${i}`,
    model,
    priority: i % 3,
    createdAt: Date.now(),
    inputs: [{ name: 'x', dtype: 'float32', shape: [1, 16], data: new Uint8Array(data.buffer) }],
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const tag = (): string => `echo${randomUUID().slice(0, 8)}`;

function result(delivery: Delivery): Outcome {
  const req = delivery.body instanceof Uint8Array ? decodeRequest(delivery.body) : requestFromJson(delivery.body);
  const r: ResultEnvelope = {
    id: req.id,
    model: req.model,
    version: '1',
    status: 'ok',
    outputs: req.inputs,
    timings: ZERO_TIMINGS,
    batchSize: 1,
    gear: 1,
    device: 0,
    worker: 'echo',
  };
  return { delivery, result: r, replyTo: req.replyTo };
}

export async function until(done: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`echo bench: ${what} did not finish within ${timeoutMs} ms`);
    await sleep(25);
  }
}

function finish(name: string, messages: number, startedAt: number): EchoResult {
  const seconds = (performance.now() - startedAt) / 1000;
  const r = { name, messages, seconds, msgsPerSec: messages / seconds };
  if (process.env['ECHO_VERBOSE']) process.stderr.write(`  ${name}: ${Math.round(r.msgsPerSec)} msgs/s\n`);
  return r;
}

export async function topicSize(kafka: Kafka, topic: string): Promise<number> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    return (await admin.fetchTopicOffsets(topic)).reduce((n, p) => n + Number(p.high) - Number(p.low), 0);
  } finally {
    await admin.disconnect();
  }
}

/** kafkajs consume → produce echo with per-batch commit: the Kafka ceiling. */
export async function kafkaRawEcho(brokers: string[], options: EchoOptions = {}): Promise<EchoResult> {
  const n = options.messages ?? 20_000;
  const make = options.makeRequest ?? defaultRequest;
  const kafka = new Kafka({ clientId: 'echo', brokers, logLevel: logLevel.NOTHING });
  const input = `${tag()}.in`;
  const output = `${input}.out`;
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [input, output].map((topic) => ({ topic, numPartitions: options.partitions ?? 4 })), waitForLeaders: true });
  await admin.disconnect();
  const producer = kafka.producer();
  await producer.connect();
  for (let i = 0; i < n; i += 1_000) {
    const messages = Array.from({ length: Math.min(1_000, n - i) }, (_, k) => ({ key: `echo-${i + k}`, value: encodeRequest(make('m', i + k)) }));
    await producer.sendBatch({ topicMessages: [{ topic: input, messages }], acks: -1 });
  }
  const profile = await startProfile('echo-kafka');
  const cpuStart = await options.cpu?.mark();
  const consumer = kafka.consumer({ groupId: `${input}.g`, maxWaitTimeInMs: 100 });
  await consumer.connect();
  await consumer.subscribe({ topics: [input], fromBeginning: true });
  let startedAt = 0;
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch }) => {
      if (startedAt === 0) startedAt = performance.now();
      await producer.sendBatch({
        topicMessages: [{ topic: output, messages: batch.messages.map((m) => ({ key: m.key, value: m.value })) }],
        acks: -1,
      });
      await consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: String(Number(batch.lastOffset()) + 1) }]);
    },
  });
  await until(async () => (await topicSize(kafka, output)) >= n, 300_000, 'kafka raw echo');
  const cpu = cpuStart === undefined ? undefined : await options.cpu?.since(cpuStart, n);
  await profile?.stop();
  const r = { ...finish('kafka raw echo (kafkajs)', n, startedAt), ...(cpu === undefined ? {} : { cpu }) };
  await consumer.disconnect();
  await producer.disconnect();
  return r;
}

async function transportEcho(
  name: string,
  transport: Transport,
  publish: (requests: RequestEnvelope[]) => Promise<void>,
  replies: () => Promise<number>,
  n: number,
  make: (model: string, i: number) => RequestEnvelope,
  model: string,
  replyTo: string,
): Promise<EchoResult> {
  for (let i = 0; i < n; i += 1_000) {
    await publish(Array.from({ length: Math.min(1_000, n - i) }, (_, k) => ({ ...make(model, i + k), replyTo })));
  }
  let startedAt = 0;
  await transport.start({
    subscriptions: [{ model, priorityLevels: 3 }],
    onDeliveries: (ds) => {
      if (startedAt === 0) startedAt = performance.now();
      transport.settle(ds.map(result)).catch((err: unknown) => console.error(`${name}: settle failed`, err));
    },
  });
  await until(async () => (await replies()) >= n, 300_000, name);
  const r = finish(name, n, startedAt);
  await transport.close();
  return r;
}

/** The fleet's own KafkaTransport: deliveries settled as soon as they arrive. */
export async function kafkaTransportEcho(brokers: string[], options: EchoOptions = {}): Promise<EchoResult> {
  const n = options.messages ?? 20_000;
  const model = tag();
  const settings = KafkaSettingsSchema.parse({ brokers, groupId: `${model}.g` });
  const producer = createProducer({ kind: 'kafka', kafka: settings }, { partitions: options.partitions ?? 4 });
  const kafka = new Kafka({ clientId: 'echo', brokers, logLevel: logLevel.NOTHING });
  const replyTo = `${model}.out`;
  // Created up front, as the raw echo creates its output topic: a worker creates a reply topic on
  // its first result (one admin round trip, ≈ 0.3 s here) and the echo should not time that.
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic: replyTo, numPartitions: options.partitions ?? 4 }], waitForLeaders: true });
  await admin.disconnect();
  const transport = new KafkaTransport(settings, { partitions: options.partitions ?? 4, ...options.kafkaTransport });
  try {
    return await transportEcho(
      'kafka transport echo (KafkaTransport)',
      transport,
      (rs) => producer.publish(rs),
      async () => topicSize(kafka, replyTo).catch(() => 0),
      n,
      options.makeRequest ?? defaultRequest,
      model,
      replyTo,
    );
  } finally {
    await producer.close();
  }
}

/** BullMQ Worker → Queue.add echo: the BullMQ ceiling. */
export async function bullmqRawEcho(redisUrl: string, options: EchoOptions = {}): Promise<EchoResult> {
  const n = options.messages ?? 5_000;
  const make = options.makeRequest ?? defaultRequest;
  const prefix = tag();
  const connection = { url: redisUrl, maxRetriesPerRequest: null } as never;
  const input = new Queue('in', { connection, prefix });
  const output = new Queue('out', { connection, prefix });
  for (let i = 0; i < n; i += 1_000) {
    await input.addBulk(
      Array.from({ length: Math.min(1_000, n - i) }, (_, k) => ({
        name: 'r',
        data: requestToJson(make('m', i + k)),
        opts: { ...options.jobOptions, jobId: `echo-${i + k}`, priority: ((i + k) % 3) + 1 },
      })),
    );
  }
  let startedAt = 0;
  const profile = await startProfile('echo-bullmq');
  const cpuStart = await options.cpu?.mark();
  const worker = new Worker(
    'in',
    async (job) => {
      if (startedAt === 0) startedAt = performance.now();
      await output.add('r', job.data, { ...options.jobOptions, jobId: job.id });
      return job.data;
    },
    { connection, prefix, concurrency: options.concurrency ?? 100 },
  );
  await until(async () => (await output.getWaitingCount()) >= n, 300_000, 'bullmq raw echo');
  const cpu = cpuStart === undefined ? undefined : await options.cpu?.since(cpuStart, n);
  await profile?.stop();
  const r = { ...finish('bullmq raw echo (Worker → add)', n, startedAt), ...(cpu === undefined ? {} : { cpu }) };
  await worker.close();
  await Promise.all([input.obliterate({ force: true }), output.obliterate({ force: true })]);
  await Promise.all([input.close(), output.close()]);
  return r;
}

/** The fleet's own BullmqTransport: deliveries settled as soon as they arrive. */
export async function bullmqTransportEcho(redisUrl: string, options: EchoOptions = {}): Promise<EchoResult> {
  const n = options.messages ?? 5_000;
  const model = tag();
  const settings = BullmqSettingsSchema.parse({ redisUrl, prefix: model });
  const producer = createProducer({ kind: 'bullmq', bullmq: settings });
  const replyTo = `${model}.out`;
  const counter = new Queue(replyTo, { connection: { url: redisUrl } as never, prefix: model });
  try {
    return await transportEcho(
      'bullmq transport echo (BullmqTransport)',
      new BullmqTransport(settings),
      (rs) => producer.publish(rs),
      () => counter.getWaitingCount(),
      n,
      options.makeRequest ?? defaultRequest,
      model,
      replyTo,
    );
  } finally {
    await producer.close();
    await counter.close();
  }
}

export async function memoryTransportEcho(options: EchoOptions = {}): Promise<EchoResult> {
  const n = options.messages ?? 20_000;
  const broker = new MemoryBroker();
  const producer = createProducer({ kind: 'memory' }, { memoryBroker: broker });
  const model = tag();
  const replyTo = `${model}.out`;
  return transportEcho(
    'memory transport echo (MemoryTransport)',
    new MemoryTransport({ broker }),
    (rs) => producer.publish(rs),
    async () => broker.depth(replyTo),
    n,
    options.makeRequest ?? defaultRequest,
    model,
    replyTo,
  );
}

export interface BenchServices {
  readonly kafkaBrokers: string[];
  readonly redisUrl: string;
  /** The local broker's process, when this bench started one (not with KAFKA_BROKERS). */
  readonly kafkaPid?: number;
}

/** KAFKA_BROKERS / REDIS_URL when set, else a throwaway local broker and redis-server. */
export async function withBenchServices<T>(fn: (services: BenchServices) => Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), 'npu-fleet-bench-'));
  const stops: Array<() => Promise<void>> = [];
  try {
    let kafkaBrokers = process.env['KAFKA_BROKERS']?.split(',').map((b) => b.trim());
    let redisUrl = process.env['REDIS_URL'];
    let kafkaPid: number | undefined;
    if (kafkaBrokers === undefined) {
      const { startLocalKafka } = await import('../test/helpers/local-kafka-service.ts');
      const k = await startLocalKafka(dir);
      stops.push(() => k.stop());
      kafkaBrokers = k.brokers;
      kafkaPid = k.pid;
    }
    if (redisUrl === undefined) {
      const { startLocalRedis } = await import('../test/helpers/local-redis-service.ts');
      const r = await startLocalRedis(dir);
      stops.push(() => r.stop());
      redisUrl = r.url;
    }
    return await fn({ kafkaBrokers, redisUrl, ...(kafkaPid === undefined ? {} : { kafkaPid }) });
  } finally {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A stage that hangs (broker trouble on a loaded machine) fails the bench instead of stalling it. */
export async function watchdog<T>(stage: string, work: Promise<T>, limitMs = 360_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`echo bench: stage "${stage}" took over ${limitMs} ms`)), limitMs);
  });
  try {
    return await Promise.race([work, limit]);
  } finally {
    clearTimeout(timer);
  }
}

function median(values: number[]): number {
  const v = [...values].sort((a, b) => a - b);
  return v[Math.floor(v.length / 2)] ?? NaN;
}

function line(name: string, runs: EchoResult[], ceiling?: EchoResult[]): string {
  const rate = median(runs.map((r) => r.msgsPerSec));
  const all = runs.map((r) => Math.round(r.msgsPerSec)).join(', ');
  // Ratios pair each run with the ceiling run of the same round (measured back to back).
  const ratio =
    ceiling === undefined ? '' : `   ${median(runs.map((r, k) => r.msgsPerSec / (ceiling[k]?.msgsPerSec ?? NaN))).toFixed(2)}x of raw (median of rounds)`;
  return `${name.padEnd(42)} ${(runs[0]?.messages ?? 0).toString().padStart(6)} msgs  median ${Math.round(rate).toString().padStart(6)} msgs/s  [${all}]${ratio}`;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const arg = (name: string): number | undefined => {
    const i = process.argv.indexOf(name);
    return i > 0 ? Number(process.argv[i + 1]) : undefined;
  };
  const messages = arg('--messages');
  const rounds = arg('--rounds') ?? 3;
  await withBenchServices(async ({ kafkaBrokers, redisUrl }) => {
    const runs: Record<'kRaw' | 'kT' | 'bRaw' | 'bT' | 'm', EchoResult[]> = { kRaw: [], kT: [], bRaw: [], bT: [], m: [] };
    // Interleaved rounds: the machine is shared, so each ratio compares runs made back to back.
    for (let round = 0; round < rounds; round++) {
      runs.kRaw.push(await watchdog('kafka raw', kafkaRawEcho(kafkaBrokers, { messages: messages ?? 20_000 })));
      runs.kT.push(await watchdog('kafka transport', kafkaTransportEcho(kafkaBrokers, { messages: messages ?? 20_000 })));
      runs.bRaw.push(await watchdog('bullmq raw', bullmqRawEcho(redisUrl, { messages: messages ?? 5_000 })));
      runs.bT.push(await watchdog('bullmq transport', bullmqTransportEcho(redisUrl, { messages: messages ?? 5_000 })));
      runs.m.push(await watchdog('memory transport', memoryTransportEcho({ messages: messages ?? 20_000 })));
    }
    console.log(`transport echo, ${rounds} interleaved rounds (runs in brackets, msgs/s)`);
    console.log(line('kafka raw echo (kafkajs)', runs.kRaw));
    console.log(line('kafka transport echo (KafkaTransport)', runs.kT, runs.kRaw));
    console.log(line('bullmq raw echo (Worker -> add)', runs.bRaw));
    console.log(line('bullmq transport echo (BullmqTransport)', runs.bT, runs.bRaw));
    console.log(line('memory transport echo (MemoryTransport)', runs.m));
  });
  process.exit(0);
}
