/**
 * The whole worker path on the simulated device (memory broker, real DeviceWorker, real binding):
 * random requests with random sample counts, pinned to a version or not, some published twice,
 * compared with the binding called directly on the version the request names. Two versions of
 * one model differ in their weights, so a result computed on the wrong version shows.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { openDevice, type Device, type LoadedModel } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { DeviceWorker } from '../../../src/runtime/device-worker.ts';
import { scanRepository } from '../../../src/runtime/model-repository.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { writeAffineVersion } from '../../helpers/affine-model.ts';

const repo = tempDir('npu-fleet-worker-diff-');
const MODEL = 'affine';

/** y = x * k + v over [batch, 4]; each version its own k and v. */
const writeVersion = (version: string, k: number, v: number): string => writeAffineVersion(join(repo, MODEL), version, k, v);

let device: Device;
let worker: DeviceWorker;
let producer: MemoryProducer;
const oracles = new Map<string, LoadedModel>();
const results = new Map<string, ResultEnvelope[]>();

beforeAll(async () => {
  process.env.NPU_FLEET_DEVICE = 'sim';
  mkdirSync(join(repo, MODEL), { recursive: true });
  writeFileSync(
    join(repo, MODEL, 'config.yaml'),
    [
      `name: ${MODEL}`,
      'inputs: [{ name: x, dtype: float32, dims: [-1, 4] }]',
      'outputs: [{ name: y, dtype: float32, dims: [-1, 4] }]',
      'maxBatchSize: 8',
      'batchGears: [1, 2, 4, 8]',
      'priorityLevels: 2',
      'defaultPriority: 1',
      'maxQueueDelayMs: [0, 5]',
      'versionPolicy: { kind: specific, versions: [2, 10] }',
    ].join('\n'),
  );
  // Gaps and a version the policy leaves out: 1 is not served, 10 (not 2) is the default.
  const paths = { '1': writeVersion('1', 100, 0), '2': writeVersion('2', 2, 1), '10': writeVersion('10', 3, -1) };
  device = await openDevice(0);
  for (const [version, path] of Object.entries(paths)) oracles.set(version, await device.loadModel(path, { gears: [1, 2, 3, 4, 5, 6, 7, 8] }));
  const broker = new MemoryBroker();
  const transport = new MemoryTransport({ broker });
  const config = parseFleetConfig({ devices: { count: 1, backend: 'sim' }, modelRepository: repo, worker: { metricsPort: 0 } });
  const snapshot = scanRepository(repo, { artifact: 'onnx' });
  worker = new DeviceWorker({ config, deviceId: 0, device, transport, metrics: new FleetMetrics({ processMetrics: false }), log: createLogger({ level: 'warn' }), snapshot });
  await worker.start();
  producer = new MemoryProducer({ broker });
  await producer.subscribeReplies('diff.replies', (r) => results.set(r.id, [...(results.get(r.id) ?? []), r]));
});

afterAll(async () => {
  await producer?.close();
  await worker?.close();
  for (const m of oracles.values()) await m.unload();
  await device?.close();
});

async function until(cond: () => boolean, ms: number, what: () => string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out: ${what()}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('worker results equal the binding called directly', () => {
  it('random sample counts, version pins, duplicates: each delivery answered once with its own rows', async () => {
    let s = 12345;
    const rnd = (): number => ((s = (s * 1103515245 + 12345) >>> 0) >>> 8) / 2 ** 24;
    const reqs: RequestEnvelope[] = [];
    const published = new Map<string, number>();
    for (let i = 0; i < 150; i++) {
      const n = 1 + Math.floor(rnd() * 4);
      const x = Float32Array.from({ length: n * 4 }, () => Math.round(rnd() * 200 - 100));
      const pin = rnd();
      const req: RequestEnvelope = {
        id: `w${i}`,
        model: MODEL,
        createdAt: Date.now(),
        replyTo: 'diff.replies',
        inputs: [{ name: 'x', dtype: 'float32', shape: [n, 4], data: new Uint8Array(x.buffer) }],
        ...(pin < 0.3 ? { version: '2' } : pin < 0.5 ? { version: '10' } : {}),
      };
      reqs.push(req);
    }
    // Bursts, with some ids published again while the first copy is queued or on the device.
    for (let i = 0; i < reqs.length; i += 10) {
      const burst = reqs.slice(i, i + 10);
      const again = burst.filter(() => rnd() < 0.2);
      await producer.publish(burst);
      if (again.length > 0) await producer.publish(again);
      for (const r of [...burst, ...again]) published.set(r.id, (published.get(r.id) ?? 0) + 1);
      await new Promise((r) => setTimeout(r, Math.floor(rnd() * 4)));
    }
    await until(
      () => [...published].every(([id, count]) => (results.get(id)?.length ?? 0) >= count),
      20_000,
      () => `missing: ${[...published].filter(([id, c]) => (results.get(id)?.length ?? 0) < c).map(([id]) => id).join(',')}`,
    );
    await new Promise((r) => setTimeout(r, 100));
    for (const req of reqs) {
      const got = results.get(req.id) ?? [];
      expect(got.length, req.id).toBe(published.get(req.id));
      const version = req.version ?? '10';
      const oracle = oracles.get(version) as LoadedModel;
      const input = req.inputs[0]!;
      const want = await oracle.execute([{ data: input.data, dims: [...input.shape] }], input.shape[0] as number);
      for (const r of got) {
        expect(r.status, `${req.id}: ${JSON.stringify(r.error)}`).toBe('ok');
        expect(r.version, req.id).toBe(version);
        expect(r.outputs?.[0]?.shape, req.id).toEqual(want.outputs[0]?.dims);
        expect([...new Uint8Array(r.outputs?.[0]?.data ?? [])], req.id).toEqual([...new Uint8Array(want.outputs[0]!.data)]);
        expect(Object.values(r.timings).every((t) => Number.isFinite(t) && t >= 0), JSON.stringify(r.timings)).toBe(true);
        expect(r.gear).toBeGreaterThanOrEqual(r.batchSize);
      }
    }
  });
});
