/**
 * Pipeline vs transport ceiling (issue 5): end-to-end throughput of the whole worker pipeline
 * (decode → scheduler → gather → simulated device → scatter → publish → ack) through Kafka and
 * through BullMQ with a near-zero-cost model, as a ratio to that transport's own echo ceiling
 * (kafkajs consume→produce; BullMQ process→add, its jobs carrying the fleet's retention options like
 * the pipeline's; the bare BullMQ echo without them is reported beside it), measured side by side
 * in one run. Target >= 0.7.
 * Both start from a pre-published backlog and stop at the last reply.
 * Run: npx tsx bench/pipeline-transport-bench.ts [--messages N] [--rounds R] [--devices D] [--processes]
 *      (BENCH_ONLY=kafka|bullmq runs one transport; BENCH_PRIORITY sets the request priority;
 *      BENCH_PROFILE=cpu|heap|live writes a profile of each timed window, see window-profile.ts;
 *      BENCH_PREFETCH sets transport.bullmq.prefetch; BENCH_KAFKA='{...}' adds transport.kafka settings;
 *      BENCH_REDIS_COMMANDS=1 prints Redis commands per message)
 */
import { runWithWorkerFlags } from './worker-flags.ts';
runWithWorkerFlags();
import { fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { parseFleetConfig } from '../src/contracts/config-loader.ts';
import type { FleetConfig, TransportSettings } from '../src/contracts/fleet-config.ts';
import type { RequestEnvelope } from '../src/contracts/request-envelope.ts';
import { openDevice } from '../src/device/index.ts';
import { createLogger } from '../src/observability/logger.ts';
import { createProducer } from '../src/producer/index.ts';
import { runWorker } from '../src/runtime/worker-process.ts';
import { workerNodeFlags } from '../src/runtime/worker-node-flags.ts';
import type { Transport } from '../src/transport/index.ts';
import { transportFor } from '../src/cli/worker-deps.ts';
import { Queue } from 'bullmq';
import { KEEP_COMPLETED, KEEP_FAILED } from '../src/transport/bullmq/bullmq-names.ts';
import { Kafka, logLevel } from 'kafkajs';
import { bullmqRawEcho, kafkaRawEcho, topicSize, until, withBenchServices } from './transport-echo.ts';
import { CpuMeter, formatCpu, type CpuUse } from './cpu-use.ts';
import { startProfile } from './window-profile.ts';

process.env.NPU_FLEET_DEVICE = 'sim';
const argIndex = process.argv.indexOf('--messages');
const N = argIndex > 0 ? Number(process.argv[argIndex + 1]) : 20_000;
const devicesIndex = process.argv.indexOf('--devices');
const DEVICES = devicesIndex > 0 ? Number(process.argv[devicesIndex + 1]) : 2;
const IN_PROCESS = !process.argv.includes('--processes');
const roundsIndex = process.argv.indexOf('--rounds');
// Five rounds: back-to-back runs on a shared VM vary by ±20 %, so the verdict takes the median of five.
const ROUNDS = roundsIndex > 0 ? Number(process.argv[roundsIndex + 1]) : 5;
const MODEL = 'mlp-classifier';
const log = createLogger({ level: 'warn' });

/** BENCH_KAFKA='{"maxBytesPerPartition":131072}': transport.kafka settings for the pipeline's workers (tuning experiments). */
function kafkaTuning(): Record<string, unknown> {
  const raw = process.env['BENCH_KAFKA'];
  return raw === undefined ? {} : (JSON.parse(raw) as Record<string, unknown>);
}

/** A near-zero-cost request: one sample of the MLP (64 floats). */
function request(i: number, replyTo: string): RequestEnvelope {
  const data = new Uint8Array(64 * 4);
  new DataView(data.buffer).setFloat32(0, i % 7, true);
  return { id: `p-${i}`, model: MODEL, priority: Number(process.env.BENCH_PRIORITY ?? 1), createdAt: Date.now(), replyTo, inputs: [{ name: 'input', dtype: 'float32', shape: [1, 64], data }] };
}

/**
 * Replies are counted the way the echo counts them (reply topic high watermarks / reply queue
 * length), so both sides of the ratio stop on the same event and neither pays for a consumer.
 */
async function replyCounter(transport: TransportSettings, replyTo: string): Promise<{ count: () => Promise<number>; close: () => Promise<void> }> {
  if (transport.kind === 'kafka') {
    const kafka = new Kafka({ clientId: 'bench-count', brokers: transport.kafka.brokers, logLevel: logLevel.NOTHING });
    // Created up front with the partitions a worker gives reply topics it creates: a metadata
    // read of a missing topic would have the broker auto-create it with one partition.
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: replyTo, numPartitions: 8 }], waitForLeaders: true });
    await admin.disconnect();
    return { count: () => topicSize(kafka, replyTo).catch(() => 0), close: async () => {} };
  }
  if (transport.kind === 'bullmq') {
    const q = new Queue(replyTo, { connection: { url: transport.bullmq.redisUrl } as never, prefix: transport.bullmq.prefix });
    return { count: () => q.getWaitingCount(), close: () => q.close() };
  }
  throw new Error('pipeline bench: kafka or bullmq only');
}

interface WorkerHandle {
  command(cmd: 'pause' | 'resume' | 'stop'): Promise<void>;
}

/**
 * One worker per device. By default all in this process, like the echo they are compared with
 * (one process; on a 2-core machine shared with the broker, separate processes only add
 * contention). --processes: each in its own process, as `npu-fleet start` runs them.
 */
async function startWorkers(config: FleetConfig): Promise<WorkerHandle[]> {
  const handles: WorkerHandle[] = [];
  for (let deviceId = 0; deviceId < DEVICES; deviceId++) {
    if (IN_PROCESS) {
      let transport: Transport | undefined;
      const create = (c: FleetConfig): Transport => (transport = transportFor(c, log));
      const w = await runWorker(config, deviceId, { artifact: 'onnx', openDevice, createTransport: create }, { log, metricsPort: 0 });
      handles.push({
        command: async (cmd) => {
          if (cmd === 'pause') transport?.pause(MODEL, [0, 1, 2]);
          else if (cmd === 'resume') transport?.resume(MODEL, [0, 1, 2]);
          else await w.stop();
        },
      });
      continue;
    }
    const child = fork(fileURLToPath(new URL('./pipeline-worker-child.ts', import.meta.url)), [JSON.stringify(config), String(deviceId), MODEL], {
      execArgv: [...workerNodeFlags(config.worker), '--import', 'tsx'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const replies: Array<(m: { ok: string }) => void> = [];
    child.on('message', (m: { ok: string }) => replies.shift()?.(m));
    const reply = (): Promise<{ ok: string }> => new Promise((r) => replies.push(r));
    const exited = new Promise<never>((_, reject) => child.once('exit', (code) => reject(new Error(`bench worker ${deviceId} exited with ${code}`))));
    await Promise.race([reply(), exited]);
    handles.push({
      command: async (cmd) => {
        const answered = reply();
        child.send({ cmd });
        await answered;
      },
    });
  }
  return handles;
}

async function pipeline(transport: TransportSettings, messages: number, meter: CpuMeter): Promise<{ msgsPerSec: number; seconds: number; cpu: CpuUse }> {
  const replyTo = `bench-replies-${randomUUID().slice(0, 8)}`;
  const producer = createProducer(transport, {});
  const counter = await replyCounter(transport, replyTo);
  const publishAll = async (count: number, offset: number): Promise<void> => {
    for (let i = 0; i < count; i += 1000) {
      await producer.publish(Array.from({ length: Math.min(1000, count - i) }, (_, k) => request(offset + i + k, replyTo)));
    }
  };
  const config = parseFleetConfig({ transport, devices: { count: DEVICES, backend: 'sim' }, models: [MODEL], worker: { metricsPort: 0 }, log: { level: 'warn' } });
  const workers = await startWorkers(config);
  // Warm-up: group joined, topics known, code hot. Then, like the echo, start from a backlog:
  // pause intake, publish everything, resume and time until the last reply.
  const warmUp = 2000;
  await publishAll(warmUp, 1_000_000);
  await until(async () => (await counter.count()) >= warmUp, 120_000, 'pipeline warm-up');
  await Promise.all(workers.map((w) => w.command('pause')));
  await new Promise((r) => setTimeout(r, 300));
  await publishAll(messages, 0);
  const profile = await startProfile(`pipeline-${transport.kind}`);
  const cpuStart = await meter.mark();
  const t0 = performance.now();
  await Promise.all(workers.map((w) => w.command('resume')));
  await until(async () => (await counter.count()) >= warmUp + messages, 300_000, 'pipeline');
  const seconds = (performance.now() - t0) / 1000;
  // In --processes mode the workers' CPU is not this process's: only Redis's figure means much.
  const cpu = await meter.since(cpuStart, messages);
  await profile?.stop();
  await Promise.all(workers.map((w) => w.command('stop')));
  await counter.close();
  await producer.close();
  return { msgsPerSec: messages / seconds, seconds, cpu };
}

function median(values: number[]): number {
  const v = [...values].sort((a, b) => a - b);
  return v[Math.floor(v.length / 2)] ?? NaN;
}

await withBenchServices(async ({ kafkaBrokers, redisUrl, kafkaPid }) => {
  // The echo carries the very requests the pipeline serves (one MLP sample, 64 floats), so the
  // ceiling moves the same bytes per message. On BullMQ it also moves the same jobs: the fleet's
  // producer and reply adds carry retention (removeOnComplete/removeOnFail, which production needs
  // so Redis does not keep every job), and trimming costs Redis and the client per job. The bare
  // echo (no retention, Redis keeps everything) is measured too and reported beside it.
  const fleetJobOptions = { removeOnComplete: KEEP_COMPLETED, removeOnFail: KEEP_FAILED };
  const meter = new CpuMeter(redisUrl, kafkaPid);
  const echo = (kind: 'kafka' | 'bullmq', messages: number, bare = false) =>
    kind === 'kafka'
      ? kafkaRawEcho(kafkaBrokers, { messages, makeRequest: (_model, i) => request(i, 'unused'), cpu: meter })
      : bullmqRawEcho(redisUrl, { messages, makeRequest: (_model, i) => request(i, 'unused'), cpu: meter, ...(bare ? {} : { jobOptions: fleetJobOptions }) });
  console.log(
    `pipeline vs transport echo ceiling: model ${MODEL} (near-zero cost), ${DEVICES} simulated devices, one worker each, ` +
      `${IN_PROCESS ? 'all in this process' : 'each in its own process'}; ${ROUNDS} interleaved rounds (echo then pipeline), ratios paired per round`,
  );
  const only = process.env['BENCH_ONLY'];
  const rows: Array<{ name: string; messages: number; ceilings: number[]; pipes: number[]; bare: number[] }> = [];
  for (const kind of ['kafka', 'bullmq'] as const) {
    if (only !== undefined && only !== kind) continue;
    const messages = kind === 'kafka' ? N : Math.min(N, 10_000);
    const row = { name: kind, messages, ceilings: [] as number[], pipes: [] as number[], bare: [] as number[] };
    const settingsFor = (tag: string): TransportSettings =>
      kind === 'kafka'
        ? parseFleetConfig({
            transport: { kind: 'kafka', kafka: { brokers: kafkaBrokers, groupId: `bench-${tag}`, topicTemplate: `bench-${tag}.{model}.requests.p{priority}`, repliesTemplate: `bench-${tag}.{model}.replies`, dlqTemplate: `bench-${tag}.{model}.dlq`, ...kafkaTuning() } },
          }).transport
        : parseFleetConfig({ transport: { kind: 'bullmq', bullmq: { redisUrl, prefix: `bench-${tag}`, ...(process.env['BENCH_PREFETCH'] ? { prefetch: Number(process.env['BENCH_PREFETCH']) } : {}) } } }).transport;
    // Uncounted warm-ups of both sides: the first run of either in a process runs on cold code
    // (V8 optimizes a function only after many calls; the pipeline has far more of them than the
    // echo), while a worker in production has served for hours. Before the pipeline had its own,
    // its round 1 ran on code only its in-round 2,000-request warm-up had exercised.
    await echo(kind, 2_000);
    await pipeline(settingsFor(`warm-${randomUUID().slice(0, 8)}`), messages, meter);
    for (let round = 0; round < ROUNDS; round++) {
      const settings = settingsFor(randomUUID().slice(0, 8));
      // The run right after a pipeline starts on a busier machine (its teardown, GC of its heap):
      // the two BullMQ echoes take turns going first, and every stage starts after a short rest.
      const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 1000));
      let bare: Awaited<ReturnType<typeof echo>> | undefined;
      if (kind === 'bullmq' && round % 2 === 0) bare = (await settle(), await echo(kind, messages, true));
      await settle();
      const ceiling = await echo(kind, messages);
      if (kind === 'bullmq' && round % 2 === 1) bare = (await settle(), await echo(kind, messages, true));
      await settle();
      const pipe = await pipeline(settings, messages, meter);
      row.ceilings.push(ceiling.msgsPerSec);
      row.pipes.push(pipe.msgsPerSec);
      if (bare !== undefined) row.bare.push(bare.msgsPerSec);
      const bareNote = bare === undefined ? '' : ` (bare echo ${bare.msgsPerSec.toFixed(0)} msg/s, ratio to it ${(pipe.msgsPerSec / bare.msgsPerSec).toFixed(2)})`;
      process.stderr.write(`  ${kind} round ${round + 1}: echo ${ceiling.msgsPerSec.toFixed(0)} msg/s, pipeline ${pipe.msgsPerSec.toFixed(0)} req/s, ratio ${(pipe.msgsPerSec / ceiling.msgsPerSec).toFixed(2)}${bareNote}\n`);
      process.stderr.write(`    echo ${formatCpu(ceiling.cpu)} | pipeline ${formatCpu(pipe.cpu)}\n`);
    }
    rows.push(row);
  }
  meter.close();
  for (const r of rows) {
    const ratio = median(r.pipes.map((p, i) => p / (r.ceilings[i] ?? NaN)));
    console.log(
      `${r.name.padEnd(7)} ${r.messages} msgs | echo ceiling median ${median(r.ceilings).toFixed(0).padStart(6)} msg/s | full pipeline median ${median(r.pipes).toFixed(0).padStart(6)} req/s | ` +
        `ratio median ${ratio.toFixed(2)} [${r.pipes.map((p, i) => (p / (r.ceilings[i] ?? NaN)).toFixed(2)).join(', ')}] (target >= 0.7) ${ratio >= 0.7 ? 'PASS' : 'MISS'}`,
    );
    if (r.bare.length > 0) {
      const bareRatios = r.pipes.map((p, i) => p / (r.bare[i] ?? NaN));
      console.log(
        `${''.padEnd(7)} reference: bare echo (no job retention, Redis keeps every job) median ${median(r.bare).toFixed(0).padStart(6)} msg/s | ` +
          `pipeline / bare echo median ${median(bareRatios).toFixed(2)} [${bareRatios.map((x) => x.toFixed(2)).join(', ')}]`,
      );
    }
  }
});
process.exit(0);
