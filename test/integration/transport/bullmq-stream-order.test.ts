// A camera's frames on BullMQ go to whichever worker fetches them: without a fleet-wide record of
// the newest frame answered per camera, worker A answered frame 4 ok after worker B answered frame
// 5 (docs/frames.md, "Order of results"). Two in-process workers on real Redis, four cameras at
// 50 fps, a 40 ms device so both workers hold frames of every camera at once: no ok result may
// reach the reply queue after a newer frame's of its camera, every frame gets exactly one result,
// and requests without a streamKey are all served. The claims are recorded (recordingClaims) to
// tell where the frames refused after the device were when a newer one was claimed. Own file: the
// simulator reads its time model from the environment when it initialises.
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
import { runWorker, type RunningWorker, type WorkerDeps } from '../../../src/runtime/worker-process.ts';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import type { AnsweredFrame, FrameClaim, Transport } from '../../../src/transport/transport.ts';
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
  // Second case: worker 1's batches take 80 ms more (a slower card, a busier host), so the other
  // worker answers newer frames while it still holds older ones. Each run prints where the frames
  // refused after the device were when their camera's mark passed them (wasteSplit): measured,
  // all but 0-1 a run had left the queue already, so no check at intake or in the queue could
  // spare their device time (docs/frames.md).
  it.each([
    { name: 'equal devices', slowMs: 0 },
    { name: 'worker 1 slower', slowMs: 80 },
  ])('$name: no ok result after a newer frame\'s of its camera, one result per frame, plain requests served', { timeout: 120_000 }, async ({ slowMs }) => {
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
    const claims: ClaimSeen[] = [];
    for (let d = 0; d < 2; d++) {
      const createTransport = (c: typeof settings): Transport => recordingClaims(transportFor(c, log), d, claims);
      const open = d === 1 && slowMs > 0 ? slowedDevice(slowMs) : openDevice;
      const w = await runWorker(settings, d, { artifact: 'onnx', openDevice: open, createTransport }, { log, metricsPort: 0 });
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
    const split = wasteSplit(arrivals.filter((r) => r.status === 'rejected' && r.device >= 0), frameAtOf, claims, slowMs);
    const summary =
      `waste split ${JSON.stringify(split)} | ok ${ok} | out of order ${outOfOrder} | ${JSON.stringify(Object.fromEntries(codes))} (of them refused after the device ${refusedServed}) | ` +
      `missing ${missing.length} | repeated ${repeated.length}`;
    console.log(`bullmq-stream-order (slow ${slowMs} ms): ${summary}`);
    expect(missing, summary).toEqual([]);
    expect(repeated, summary).toEqual([]);
    expect(ok, summary).toBeGreaterThan(100);
    expect(outOfOrder, summary).toBe(0);
    // Every frame refused after the device had a newer frame of its camera claimed before it.
    expect(split.unknown, summary).toBe(0);
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

/** openDevice whose batches take `extraMs` longer, one at a time as on a device (before the execute). */
function slowedDevice(extraMs: number): WorkerDeps['openDevice'] {
  return async (id) => {
    const device = await openDevice(id);
    let tail: Promise<unknown> = Promise.resolve();
    return {
      id: device.id,
      memInfo: () => device.memInfo(),
      close: () => device.close(),
      loadModel: async (path, opts) => {
        const m = await device.loadModel(path, opts);
        return {
          gears: m.gears,
          inputs: m.inputs,
          outputs: m.outputs,
          unload: () => m.unload(),
          execute: (inputs, gear) => {
            const run = tail.then(async () => {
              await new Promise((r) => setTimeout(r, extraMs));
              return m.execute(inputs, gear);
            });
            tail = run.catch(() => undefined);
            return run;
          },
        };
      },
    };
  };
}

/** A claim's frames that became their stream's newest, when its reply came back, by worker. */
interface ClaimSeen {
  readonly worker: number;
  readonly at: number;
  readonly frames: readonly AnsweredFrame[];
}

/** `t` with its claims recorded in `seen` (the drill's measure of when a camera's mark moved). */
function recordingClaims(t: Transport, worker: number, seen: ClaimSeen[]): Transport {
  return new Proxy(t, {
    get(target, prop) {
      if (prop === 'claimNewestFrames' && target.claimNewestFrames !== undefined) {
        return async (frames: readonly AnsweredFrame[]): Promise<FrameClaim> => {
          const claim = await (target.claimNewestFrames as NonNullable<Transport['claimNewestFrames']>).call(target, frames);
          seen.push({ worker, at: Date.now(), frames: frames.filter((_, i) => claim.newer[i] === undefined) });
          return claim;
        };
      }
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

/**
 * Where each frame refused after the device was when its camera's mark first passed it (a newer
 * frame claimed by the other worker; `at` is the claim's reply, late by at most one round trip):
 * not yet at its worker's intake (`beforeArrival`: a check of the marks at intake would refuse
 * it), in its worker's queue (`whileQueued`: a scheduler told of the marks would drop it), handed
 * to the device behind the batch ahead (`waitingForDevice`: the second batch in flight; worker 1's
 * start counts its extra `slowMs`), executing (`onDevice`), or done and on its way to its own
 * claim (`afterDevice`: the two claims raced). `unknown`: no newer frame of its camera was claimed
 * before, which would make the refusal wrong.
 */
function wasteSplit(refused: readonly ResultEnvelope[], frameAtOf: ReadonlyMap<string, { camera: string; createdAt: number }>, claims: readonly ClaimSeen[], slowMs: number) {
  const split = { beforeArrival: 0, whileQueued: 0, waitingForDevice: 0, onDevice: 0, afterDevice: 0, unknown: 0 };
  for (const r of refused) {
    const frame = frameAtOf.get(r.id);
    if (frame === undefined) continue;
    const markAt = claims.find((c) => c.frames.some((f) => f.streamKey === frame.camera && f.frameAt > frame.createdAt))?.at;
    const arrivedAt = frame.createdAt + r.timings.queuedMs;
    const dispatchedAt = arrivedAt + r.timings.batchWaitMs;
    if (markAt === undefined) split.unknown++;
    else if (markAt <= arrivedAt) split.beforeArrival++;
    else if (markAt <= dispatchedAt) split.whileQueued++;
    else if (markAt <= (r.completedAt ?? Infinity) - r.timings.deviceMs - (r.device === 1 ? slowMs : 0)) split.waitingForDevice++;
    else if (markAt <= (r.completedAt ?? Infinity)) split.onDevice++;
    else split.afterDevice++;
  }
  return split;
}
