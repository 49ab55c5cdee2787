// Latest frame wins: a video pipeline publishes three cameras' frames faster than a slowed device
// serves them, to a model with streams.superseded: drop. Every frame gets exactly one result; a
// frame a newer one of its camera displaced from the queue is rejected/SUPERSEDED and never
// reached the device; each camera's last frame is served. Own file: the simulator reads its time
// model from the environment when it initialises.
import { appendFileSync, cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { createProducer } from '../../../src/producer/index.ts';
import type { DeviceLike, ExecutableModel } from '../../../src/runtime/model-lanes.ts';
import { runWorker } from '../../../src/runtime/worker-process.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { uniqueName } from '../../helpers/services.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';
// Every batch takes 40 ms whatever its size: three frames arrive far faster than that.
process.env['NPU_FLEET_SIM_PROFILE'] = 'base=40ms,perItem=0ms';

const MODEL = 'mlp-classifier';
const STREAMS = 3;
const FRAMES = 50;
const FEATURES = 64;
const log = createLogger({ level: 'warn' });

const cleanup: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

/** Each frame's first feature is its tag (≥ 1); gear padding rows are zero. */
const tagOf = (stream: number, frame: number): number => 1 + stream * FRAMES + frame;

/** The real simulated device, recording the tag of every row each execution got. */
async function recordingDevice(deviceId: number, executed: Set<number>): Promise<DeviceLike> {
  const device = await openDevice(deviceId);
  return {
    id: device.id,
    memInfo: () => device.memInfo(),
    close: () => device.close(),
    async loadModel(path, opts): Promise<ExecutableModel> {
      const model = await device.loadModel(path, opts);
      return {
        gears: model.gears,
        inputs: model.inputs,
        outputs: model.outputs,
        execute(inputs, gear) {
          const first = inputs[0] as { data: Uint8Array };
          const rows = new Float32Array(first.data.buffer, first.data.byteOffset, first.data.byteLength / 4);
          for (let r = 0; r < gear; r++) if (rows[r * FEATURES] !== 0) executed.add(rows[r * FEATURES] as number);
          return model.execute(inputs, gear);
        },
        unload: () => model.unload(),
      };
    },
  };
}

function frameRequest(stream: number, frame: number, replyTo: string, t0: number): RequestEnvelope {
  const features = new Float32Array(FEATURES).fill(0.5);
  features[0] = tagOf(stream, frame);
  return {
    id: `cam${stream}~${frame}`,
    model: MODEL,
    priority: 1,
    streamKey: `cam${stream}`,
    // Strictly increasing per camera: frame order, not the millisecond clock, decides.
    createdAt: t0 + frame,
    replyTo,
    inputs: [{ name: 'input', dtype: 'float32', shape: [1, FEATURES], data: new Uint8Array(features.buffer) }],
  };
}

/** The value of one series in the exposition (0 when absent). */
function sample(text: string, name: string, labels: Record<string, string>): number {
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    if (Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('streams.superseded: drop (latest frame wins) on the memory broker', () => {
  it('answers superseded frames at once without device time and serves each camera\'s last frame', async () => {
    const repo = mkdtempSync(join(tmpdir(), 'npu-fleet-supersede-'));
    cleanup.push(() => rmSync(repo, { recursive: true, force: true }));
    cpSync(`examples/models/${MODEL}`, join(repo, MODEL), { recursive: true });
    appendFileSync(join(repo, MODEL, 'config.yaml'), 'streams: { superseded: drop }\n');

    const config = parseFleetConfig({ devices: { count: 1, backend: 'sim' }, modelRepository: repo, models: [MODEL], worker: { metricsPort: 0 }, log: { level: 'warn' } });
    const broker = new MemoryBroker();
    const executed = new Set<number>();
    const worker = await runWorker(
      config,
      0,
      { artifact: 'onnx', openDevice: (id) => recordingDevice(id, executed), createTransport: () => new MemoryTransport({ broker }) },
      { log, metricsPort: 0 },
    );
    cleanup.push(() => worker.stop());
    const producer = createProducer(config.transport, { memoryBroker: broker, partitions: 4 });
    cleanup.push(() => producer.close());
    const replyTo = uniqueName('frames');
    const results = new Map<string, ResultEnvelope[]>();
    const arrival: ResultEnvelope[] = [];
    const sub = await producer.subscribeReplies(replyTo, (r: ResultEnvelope) => {
      results.set(r.id, [...(results.get(r.id) ?? []), r]);
      arrival.push(r);
    });
    cleanup.push(() => sub.close());

    const t0 = Date.now();
    // 600 frames/s against a device that serves 3 per 40 ms: several frames of each camera arrive
    // during every batch, some while that camera's previous frame is on the device.
    for (let f = 0; f < FRAMES; f++) {
      await producer.publish(Array.from({ length: STREAMS }, (_, s) => frameRequest(s, f, replyTo, t0)));
      await sleep(5);
    }
    const until = Date.now() + 30_000;
    while (results.size < STREAMS * FRAMES && Date.now() < until) await sleep(20);
    // Anything answered twice would arrive by now.
    await sleep(300);

    expect(results.size).toBe(STREAMS * FRAMES);
    const superseded: ResultEnvelope[] = [];
    for (const [id, rs] of results) {
      expect(rs, id).toHaveLength(1);
      const r = rs[0] as ResultEnvelope;
      const [cam, frame] = id.split('~') as [string, string];
      const tag = tagOf(Number(cam.slice(3)), Number(frame));
      if (r.status === 'ok') {
        expect(executed.has(tag), `${id} ok but never on the device`).toBe(true);
        continue;
      }
      expect(r.status, id).toBe('rejected');
      expect(r.error?.code, id).toBe('SUPERSEDED');
      expect(r.device, id).toBe(-1);
      expect(executed.has(tag), `${id} superseded but it reached the device`).toBe(false);
      // The message names the newer frame of the same camera that displaced it.
      const newer = /superseded by request (\S+) of stream "([^"]+)"/.exec(r.error?.message ?? '');
      expect(newer?.[2], id).toBe(cam);
      const [newerCam, newerFrame] = (newer?.[1] ?? '').split('~');
      expect(newerCam, id).toBe(cam);
      expect(Number(newerFrame), id).toBeGreaterThan(Number(frame));
      superseded.push(r);
    }
    // Every execution row was a frame answered ok: nothing superseded, nothing unanswered ran.
    expect(executed.size).toBe(STREAMS * FRAMES - superseded.length);
    expect(superseded.length).toBeGreaterThan(STREAMS * FRAMES / 3);
    for (let s = 0; s < STREAMS; s++) {
      expect(results.get(`cam${s}~${FRAMES - 1}`)?.[0]?.status, `cam${s}'s last frame`).toBe('ok');
      const served = arrival.filter((r) => r.status === 'ok' && r.id.startsWith(`cam${s}~`)).map((r) => Number(r.id.split('~')[1]));
      // Frames served mid-stream: newer frames arriving once a frame was dispatched left it alone.
      expect(served.length, `cam${s} served ${served.join(',')}`).toBeGreaterThanOrEqual(2);
      // The served frames of a camera still come back in frame order.
      expect(served).toEqual([...served].sort((a, b) => a - b));
    }
    // Counted as rejections, like any other refusal (once settled with the broker).
    let rejected = 0;
    for (const end = Date.now() + 5_000; Date.now() < end; await sleep(20)) {
      rejected = sample(await worker.metrics.render(), 'npu_fleet_requests_total', { model: MODEL, status: 'rejected' });
      if (rejected === superseded.length) break;
    }
    expect(rejected).toBe(superseded.length);
    expect(sample(await worker.metrics.render(), 'npu_fleet_requests_total', { model: MODEL, status: 'ok' })).toBe(STREAMS * FRAMES - superseded.length);
  }, 60_000);
});
