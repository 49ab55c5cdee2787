// A camera's frames on BullMQ go to whichever worker fetches them: without a fleet-wide record of
// the newest frame answered per camera, worker A answered frame 4 ok after worker B answered frame
// 5 (docs/frames.md, "Order of results"). Two in-process workers on real Redis, four cameras at
// 50 fps, a 40 ms device so both workers hold frames of every camera at once: no ok result may
// reach the reply queue after a newer frame's of its camera, every frame gets exactly one result,
// and requests without a streamKey are all served. Own file: the simulator reads its time model
// from the environment when it initialises.
import { appendFileSync, cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { loadModelConfig, parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { createProducer } from '../../../src/producer/index.ts';
import { prng, syntheticRequest } from '../../../src/runtime/demo-load.ts';
import { runWorker, type RunningWorker } from '../../../src/runtime/worker-process.ts';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';
// 40 ms a batch whatever its size: 4 cameras at 50 fps keep both workers busy.
process.env['NPU_FLEET_SIM_PROFILE'] = 'base=40ms,perItem=0ms';
const log = createLogger({ level: 'warn' });

const CAMERAS = 4;
const FRAME_INTERVAL_MS = 20;
const TICKS = 200;
/** Every this many ticks, one request without a streamKey rides along. */
const PLAIN_EVERY = 4;

const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => undefined);
});

describe('BullMQ, two workers, latest frame wins: a camera\'s ok results in frame order', () => {
  it('no ok result after a newer frame\'s of its camera, one result per frame, plain requests served', { timeout: 120_000 }, async () => {
    const dir = tempDir('npu-fleet-bullmq-stream-order-');
    const repo = join(dir, 'models');
    cpSync('examples/models/mlp-classifier', join(repo, 'frames-model'), { recursive: true });
    const cfgFile = join(repo, 'frames-model', 'config.yaml');
    writeFileSync(cfgFile, stringify({ ...(parse(readFileSync(cfgFile, 'utf8')) as object), name: 'frames-model' }));
    appendFileSync(cfgFile, 'streams: { superseded: drop }\n');
    const settings = parseFleetConfig({
      transport: { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('streamorder') } },
      devices: { count: 2, backend: 'sim' },
      modelRepository: repo,
      models: ['frames-model'],
      worker: { metricsPort: 0 },
      log: { level: 'warn' },
    });
    const workers: RunningWorker[] = [];
    for (let d = 0; d < 2; d++) {
      const w = await runWorker(settings, d, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
      workers.push(w);
      cleanup.push(() => w.stop());
    }
    const producer = createProducer(settings.transport);
    cleanup.push(() => producer.close());
    const replyTo = uniqueName('frames');
    const arrivals: ResultEnvelope[] = [];
    const sub = await producer.subscribeReplies(replyTo, (r) => arrivals.push(r));
    cleanup.push(() => sub.close());

    const model = loadModelConfig(cfgFile);
    const rand = prng(7);
    const frameAtOf = new Map<string, { camera: string; createdAt: number }>();
    const plainIds = new Set<string>();
    const lastAt = new Array<number>(CAMERAS).fill(0);
    const base = (seq: number): RequestEnvelope => syntheticRequest(model, seq, rand, { idPrefix: 'r', replyTo, deadlineShare: 0, maxSamples: 1 });
    const t0 = Date.now();
    for (let t = 0; t < TICKS; t++) {
      const batch: RequestEnvelope[] = [];
      for (let c = 0; c < CAMERAS; c++) {
        // Strictly increasing per camera, as a video pipeline's frame times are.
        const createdAt = Math.max(Date.now(), lastAt[c]! + 1);
        lastAt[c] = createdAt;
        const id = `cam${c}~${t}`;
        frameAtOf.set(id, { camera: `cam${c}`, createdAt });
        batch.push({ ...base(t), id, priority: 0, streamKey: `cam${c}`, createdAt, deadlineAt: createdAt + 2_000 });
      }
      if (t % PLAIN_EVERY === 0) {
        const id = `plain~${t}`;
        plainIds.add(id);
        batch.push({ ...base(t), id, priority: 0, deadlineAt: Date.now() + 10_000 });
      }
      await producer.publish(batch);
      const nextAt = t0 + (t + 1) * FRAME_INTERVAL_MS;
      await new Promise((r) => setTimeout(r, Math.max(0, nextAt - Date.now())));
    }
    const expected = frameAtOf.size + plainIds.size;
    const until = Date.now() + 30_000;
    while (arrivals.length < expected && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    // A second answer to any request would come within this.
    await new Promise((r) => setTimeout(r, 1_000));

    const perId = new Map<string, number>();
    for (const r of arrivals) perId.set(r.id, (perId.get(r.id) ?? 0) + 1);
    const missing = [...frameAtOf.keys(), ...plainIds].filter((id) => !perId.has(id));
    const repeated = [...perId].filter(([, n]) => n > 1);
    const newestOk = new Map<string, number>();
    let outOfOrder = 0;
    let ok = 0;
    const codes = new Map<string, number>();
    for (const r of arrivals) {
      const frame = frameAtOf.get(r.id);
      if (frame === undefined) continue;
      const key = r.status === 'ok' ? 'ok' : `${r.status}/${r.error?.code ?? ''}`;
      codes.set(key, (codes.get(key) ?? 0) + 1);
      if (r.status !== 'ok') continue;
      ok++;
      const newest = newestOk.get(frame.camera);
      if (newest !== undefined && frame.createdAt < newest) outOfOrder++;
      else newestOk.set(frame.camera, frame.createdAt);
    }
    const plain = arrivals.filter((r) => plainIds.has(r.id));
    // Served, then refused as older than a frame its camera had answered on the other worker.
    const refusedServed = arrivals.filter((r) => r.status === 'rejected' && r.device >= 0).length;
    const summary =
      `ok ${ok} | out of order ${outOfOrder} | ${JSON.stringify(Object.fromEntries(codes))} (of them refused after the device ${refusedServed}) | ` +
      `missing ${missing.length} | repeated ${repeated.length}`;
    console.log(`bullmq-stream-order: ${summary}`);
    expect(missing, summary).toEqual([]);
    expect(repeated, summary).toEqual([]);
    expect(ok, summary).toBeGreaterThan(100);
    expect(outOfOrder, summary).toBe(0);
    expect(plain.map((r) => r.status), summary).toEqual(plain.map(() => 'ok'));
    // Each answer is counted as it went out: a frame refused after the device as rejected, not ok.
    let rejectedCounted = 0;
    let okCounted = 0;
    for (const w of workers) {
      const text = await w.metrics.render();
      rejectedCounted += requestsTotal(text, 'rejected');
      okCounted += requestsTotal(text, 'ok') + requestsTotal(text, 'late');
    }
    expect(rejectedCounted, summary).toBe(arrivals.filter((r) => r.status === 'rejected').length);
    expect(okCounted, summary).toBe(arrivals.filter((r) => r.status === 'ok').length);
    // Both workers served frames (else the drill shows nothing about several workers).
    expect(new Set(arrivals.filter((r) => r.status === 'ok').map((r) => r.worker)).size, summary).toBe(2);
  });
});

/** npu_fleet_requests_total of frames-model with `status`, in a worker's exposition. */
function requestsTotal(text: string, status: string): number {
  let total = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('npu_fleet_requests_total{') && line.includes('model="frames-model"') && line.includes(`status="${status}"`)) total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}
