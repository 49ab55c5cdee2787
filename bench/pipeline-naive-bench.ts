/**
 * Pipeline bench (issue 5): the batching worker vs a naive one-message-at-a-time worker, both on
 * the same binding and the simulator's device model (base=2ms, perItem=0.1ms), measured side by
 * side in one run over the in-process memory broker (so the broker is not the bottleneck).
 *   1. saturation throughput: a backlog of requests, completions per second (target >= 8x naive)
 *   2. latency at 70 % of the batching worker's saturation rate: p99 (target <= 3x batch time)
 * Run: npx tsx bench/pipeline-naive-bench.ts [--requests N]
 */
import type { ResultEnvelope } from '../src/contracts/result-envelope.ts';
import { runWithWorkerFlags } from './worker-flags.ts';
import type { Delivery } from '../src/transport/transport.ts';

runWithWorkerFlags();
// The simulator reads its profile when the addon initialises ACL: set it before any device import.
process.env.NPU_FLEET_SIM_PROFILE = process.env.NPU_FLEET_SIM_PROFILE ?? 'base=2ms,perItem=0.1ms';
process.env.NPU_FLEET_DEVICE = 'sim';

const { decodeRequest } = await import('../src/codec/index.ts');
const { parseFleetConfig, loadModelConfig } = await import('../src/contracts/config-loader.ts');
const { effectiveGears } = await import('../src/contracts/model-config.ts');
const { openDevice } = await import('../src/device/index.ts');
const { createLogger } = await import('../src/observability/logger.ts');
const { MemoryProducer } = await import('../src/producer/memory-producer.ts');
const { MemoryBroker } = await import('../src/transport/memory/memory-broker.ts');
const { MemoryTransport } = await import('../src/transport/memory/memory-transport.ts');
const { gatherInputs, scatterOutputs } = await import('../src/runtime/batch-io.ts');
const { buildResult } = await import('../src/runtime/result-builder.ts');
const { prng, syntheticRequest } = await import('../src/runtime/demo-load.ts');
const { runWorker } = await import('../src/runtime/worker-process.ts');

const argIndex = process.argv.indexOf('--requests');
const N = argIndex > 0 ? Number(process.argv[argIndex + 1]) : 6000;
const MODEL = 'mlp-classifier';
const modelConfig = loadModelConfig(`examples/models/${MODEL}/config.yaml`);
const log = createLogger({ level: 'warn' });
const gears = effectiveGears(modelConfig);
const batchTimeMs = 2 + 0.1 * (gears[gears.length - 1] ?? 32);

function makeRequests(count: number, seed: number, replyTo: string) {
  const rand = prng(seed);
  return Array.from({ length: count }, (_, i) => ({
    ...syntheticRequest(modelConfig, i, rand, { idPrefix: `b${seed}`, replyTo, deadlineShare: 0, maxSamples: 1 }),
    // The model's default priority: a bulk-style request that may wait a few ms for a fuller batch.
    priority: modelConfig.defaultPriority,
  }));
}

interface Run {
  completed: number;
  elapsedMs: number;
  latencies: number[];
}

async function collect(producer: InstanceType<typeof MemoryProducer>, replyTo: string, count: number, send: () => Promise<void>): Promise<Run> {
  const latencies: number[] = [];
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  const sub = await producer.subscribeReplies(replyTo, (r: ResultEnvelope) => {
    latencies.push(r.timings.totalMs);
    if (latencies.length === count) done();
  });
  const t0 = performance.now();
  await send();
  await finished;
  const elapsedMs = performance.now() - t0;
  await sub.close();
  return { completed: latencies.length, elapsedMs, latencies };
}

/** The naive worker: one message, one device call at gear 1..n, one publish, one ack, repeat. */
async function startNaive(broker: InstanceType<typeof MemoryBroker>) {
  const device = await openDevice(1);
  const model = await device.loadModel(`examples/models/${MODEL}/1/model.onnx`, { gears });
  const transport = new MemoryTransport({ broker, prefetch: 1 });
  const queue: Delivery[] = [];
  let busy = false;
  const loop = async (): Promise<void> => {
    if (busy) return;
    busy = true;
    while (queue.length > 0) {
      const d = queue.shift() as Delivery;
      const request = decodeRequest(d.body as Uint8Array);
      const arrivedAt = Date.now();
      const items = request.inputs[0]?.shape[0] ?? 1;
      const gear = gears.find((g) => g >= items) ?? items;
      const { outputs, timings } = await model.execute(gatherInputs([request], modelConfig, { gear, boundLength: null }), gear);
      const [mine] = scatterOutputs(outputs, modelConfig, { gear, members: [{ items } as never] });
      const result = buildResult({ id: request.id, model: request.model, createdAt: request.createdAt }, { worker: 'naive', device: 1 }, {
        status: 'ok', version: '1', outputs: mine ?? [], nowMs: Date.now(), batchSize: items, gear,
        timings: { queuedMs: arrivedAt - request.createdAt, deviceMs: timings.copyInMs + timings.executeMs + timings.copyOutMs },
      });
      await transport.settle([{ delivery: d, result, replyTo: request.replyTo }]);
    }
    busy = false;
  };
  await transport.start({ subscriptions: [{ model: MODEL, priorityLevels: 3 }], onDeliveries: (ds) => { queue.push(...ds); void loop(); } });
  return { async stop() { await transport.close(); await model.unload(); await device.close(); } };
}

async function startBatching(broker: InstanceType<typeof MemoryBroker>) {
  const config = parseFleetConfig({ devices: { count: 1, backend: 'sim' }, models: [MODEL], worker: { metricsPort: 0 }, log: { level: 'warn' } });
  return runWorker(config, 0, { artifact: 'onnx', openDevice, createTransport: () => new MemoryTransport({ broker }) }, { log, metricsPort: 0 });
}

function pct(values: number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? 0;
}

async function saturation(kind: 'naive' | 'batching', count: number): Promise<Run> {
  const broker = new MemoryBroker();
  const worker = kind === 'naive' ? await startNaive(broker) : await startBatching(broker);
  const producer = new MemoryProducer({ broker });
  const replyTo = `${kind}.sat.replies`;
  const reqs = makeRequests(count, kind === 'naive' ? 1 : 2, replyTo);
  const run = await collect(producer, replyTo, count, () => producer.publish(reqs.map((r) => ({ ...r, createdAt: Date.now() }))));
  await producer.close();
  await worker.stop();
  return run;
}

async function openLoop(ratePerSec: number, durationMs: number): Promise<Run> {
  const broker = new MemoryBroker();
  const worker = await startBatching(broker);
  const producer = new MemoryProducer({ broker });
  const replyTo = 'open.replies';
  // Warm-up (JIT, kernel thread pool, learnt device-time estimates) before anything is measured.
  const warm = makeRequests(400, 9, 'warm.replies');
  await collect(producer, 'warm.replies', warm.length, async () => {
    for (let i = 0; i < warm.length; i += 20) {
      await producer.publish(warm.slice(i, i + 20).map((r) => ({ ...r, createdAt: Date.now() })));
      await new Promise((res) => setTimeout(res, 5));
    }
  });
  const count = Math.round((ratePerSec * durationMs) / 1000);
  const reqs = makeRequests(count, 3, replyTo);
  const rand = prng(11);
  const run = await collect(producer, replyTo, count, async () => {
    let next = performance.now();
    for (const r of reqs) {
      next += -Math.log(1 - rand()) * (1000 / ratePerSec); // Poisson arrivals
      const waitMs = next - performance.now();
      if (waitMs > 1) await new Promise((res) => setTimeout(res, waitMs));
      void producer.publish({ ...r, createdAt: Date.now() });
    }
  });
  await producer.close();
  await worker.stop();
  return run;
}

console.log(`pipeline bench: model ${MODEL}, simulator profile ${process.env.NPU_FLEET_SIM_PROFILE}, node flags [${process.execArgv.filter((f) => !f.includes("tsx")).join(" ")}], full batch (gear ${gears[gears.length - 1]}) device time ${batchTimeMs.toFixed(1)} ms`);
const naive = await saturation('naive', Math.min(N, 2000));
const naiveRate = (naive.completed * 1000) / naive.elapsedMs;
console.log(`naive one-at-a-time worker:  ${naiveRate.toFixed(0).padStart(6)} req/s  (${naive.completed} requests)`);
const batching = await saturation('batching', N);
const batchRate = (batching.completed * 1000) / batching.elapsedMs;
console.log(`batching worker (1 device):  ${batchRate.toFixed(0).padStart(6)} req/s  (${batching.completed} requests)`);
// The target pairs the two: carry 8x the naive worker's throughput, with p99 under 3 batch times.
const rate = Math.round(naiveRate * 8);
const open = await openLoop(rate, 10_000);
const p50 = pct(open.latencies, 0.5);
const p99 = pct(open.latencies, 0.99);
console.log(`open loop at ${rate} req/s (8x naive, ${((rate / batchRate) * 100).toFixed(0)}% of saturation): p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms`);
for (const share of [0.3, 0.5]) {
  const r = Math.round(batchRate * share);
  const o = await openLoop(r, 3000);
  console.log(`open loop at ${r} req/s (${share * 100}% of saturation): p50 ${pct(o.latencies, 0.5).toFixed(1)} ms, p99 ${pct(o.latencies, 0.99).toFixed(1)} ms`);
}
console.log('');
console.log(`saturation throughput vs naive: ${(batchRate / naiveRate).toFixed(1)}x (target >= 8x) ${batchRate / naiveRate >= 8 ? 'PASS' : 'MISS'}`);
console.log(`p99 at 8x naive load vs full-batch device time: ${(p99 / batchTimeMs).toFixed(2)}x (target <= 3x) ${p99 <= 3 * batchTimeMs ? 'PASS' : 'MISS'}`);
process.exit(0);
