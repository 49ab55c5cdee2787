// The byte bound on a worker's local queue (queue.softLimitBytes), on a real Kafka broker: with
// the item and per-partition count bounds set out of reach, only the bytes held can pause intake,
// so a deep backlog of large requests stays at the broker instead of in the worker's memory.
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { encodeRequest } from '../../../src/codec/index.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { createProducer } from '../../../src/producer/index.ts';
import type { DeviceLike } from '../../../src/runtime/load-checked.ts';
import { runWorker, type RunningWorker } from '../../../src/runtime/worker-process.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { withExecute } from '../../helpers/wrapped-device.ts';

const MODEL = 'mlp-classifier';
const REQUESTS = 1200;
const SAMPLES = 32;
const SOFT_LIMIT_BYTES = 64 * 1024;

let worker: RunningWorker | undefined;
const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  await worker?.stop();
  worker = undefined;
  for (const c of closers.splice(0).reverse()) await c().catch(() => undefined);
});

/** The simulated device, 3 ms slower per batch, so the backlog outruns it. */
function slowDevice(inner: DeviceLike): DeviceLike {
  return withExecute(inner, (model) => async (inputs, gear) => (await new Promise((r) => setTimeout(r, 3)), model.execute(inputs, gear)));
}

function request(i: number, replyTo: string): RequestEnvelope {
  const data = new Uint8Array(SAMPLES * 64 * 4);
  new DataView(data.buffer).setFloat32(0, i % 13, true);
  return { id: `bound-${i}`, model: MODEL, priority: 2, createdAt: Date.now(), replyTo, inputs: [{ name: 'input', dtype: 'float32', shape: [SAMPLES, 64], data }] };
}

async function peakHeldBytes(softLimitBytes: number): Promise<{ peak: number; answered: number; ok: number; pausedLogs: number; elapsedMs: number }> {
  process.env.NPU_FLEET_DEVICE = 'sim';
  const repo = join(tempDir('npu-fleet-bound-'), 'models');
  cpSync(join('examples/models', MODEL), join(repo, MODEL), { recursive: true });
  const configFile = join(repo, MODEL, 'config.yaml');
  const yaml = readFileSync(configFile, 'utf8').replace(/^queue: .*$/m, `queue: { softLimitItems: 1000000, hardLimitItems: 2000000, softLimitBytes: ${softLimitBytes}, hardLimitBytes: ${Math.max(softLimitBytes, 64 * 1024 * 1024)} }`);
  writeFileSync(configFile, yaml);
  const tag = uniqueName('bound');
  const config = parseFleetConfig({
    modelRepository: repo,
    transport: { kind: 'kafka', kafka: { brokers: getServices().kafkaBrokers, groupId: tag, topicTemplate: `${tag}.{model}.p{priority}`, lowPriorityInflightPerPartition: 1_000_000 } },
    devices: { count: 1, backend: 'sim' },
    models: [MODEL],
    worker: { metricsPort: 0 },
  });
  const lines: Array<Record<string, unknown>> = [];
  const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
  const producer = createProducer(config.transport, {});
  closers.push(() => producer.close());
  const replyTo = `${tag}.replies`;
  const statuses = new Map<string, string>();
  const sub = await producer.subscribeReplies(replyTo, (r) => void statuses.set(r.id, r.status));
  closers.push(() => sub.close());
  // The whole backlog is at the broker before the worker starts.
  worker = await runWorker(config, 0, { artifact: 'onnx', openDevice: async (id) => slowDevice(await openDevice(id)), createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
  for (let i = 0; i < REQUESTS; i += 100) await producer.publish(Array.from({ length: 100 }, (_, k) => request(i + k, replyTo)));
  let peak = 0;
  const startedAt = Date.now();
  const end = Date.now() + 120_000;
  while (statuses.size < REQUESTS && Date.now() < end) {
    await worker.worker.exportGauges();
    const gauge = await worker.metrics.registry.getSingleMetric('npu_fleet_local_queue_bytes')?.get();
    peak = Math.max(peak, ...(gauge?.values.map((v) => v.value) ?? [0]));
    await new Promise((r) => setTimeout(r, 5));
  }
  return {
    peak,
    answered: statuses.size,
    ok: [...statuses.values()].filter((s) => s === 'ok').length,
    pausedLogs: lines.filter((l) => l.msg === 'backpressure: intake paused').length,
    elapsedMs: Date.now() - startedAt,
  };
}

describe('local queue byte bound', () => {
  it('a deep backlog of 8 KiB requests: intake pauses on queue.softLimitBytes and the bytes held stay near it; every request is served', async () => {
    const frameBytes = encodeRequest(request(0, 'x')).byteLength;
    const r = await peakHeldBytes(SOFT_LIMIT_BYTES);
    console.log(`[memory bound] ${REQUESTS} requests of ${frameBytes} B (${((REQUESTS * frameBytes) / 2 ** 20).toFixed(1)} MiB): peak held ${(r.peak / 1024).toFixed(0)} KiB with softLimitBytes ${SOFT_LIMIT_BYTES / 1024} KiB; ${r.pausedLogs} pauses`);
    expect(r.answered).toBe(REQUESTS);
    expect(r.ok).toBe(REQUESTS);
    expect(r.pausedLogs).toBeGreaterThan(0);
    // Intake flaps between paused and resumed many times a second here: one line per 30 s says so.
    expect(r.pausedLogs).toBeLessThanOrEqual(Math.ceil(r.elapsedMs / 30_000));
    // A fetch answered before the pause is still delivered: at most maxBytesPerPartition (256 KiB)
    // from each of the topic's 8 partitions (plus one request). Without the byte bound the worker
    // held the whole 9.6 MiB backlog.
    expect(r.peak).toBeLessThanOrEqual(SOFT_LIMIT_BYTES + 8 * 256 * 1024 + frameBytes);
    expect(r.peak).toBeLessThan((REQUESTS * frameBytes) / 4);
  }, 180_000);
});
