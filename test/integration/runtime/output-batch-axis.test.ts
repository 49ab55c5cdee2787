/**
 * A dynamic-batch model whose output's batch is not one leading row per item, served by a real
 * worker (memory broker, real DeviceWorker, simulated device): a flattened output (config dims
 * [-1], gear x 4 values) and a transposed one ([3, -1]). Requests of 1..3 items share batches;
 * each result must equal the model run on that request alone. The worker used to split every
 * output along dim 0 one row per item: the flattened one gave each request 1 value per item.
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
import { flattenModel, transposeModel } from '../../helpers/gear-output-models.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { uniqueName } from '../../helpers/unique-name.ts';

const repo = tempDir('npu-fleet-output-axis-');
const MODELS = {
  flatten: { width: 4, outputDims: '[-1]', write: flattenModel },
  transpose: { width: 3, outputDims: '[3, -1]', write: transposeModel },
} as const;
type ModelName = keyof typeof MODELS;

let device: Device;
let worker: DeviceWorker;
let producer: MemoryProducer;
const oracles = new Map<ModelName, LoadedModel>();
const results = new Map<string, ResultEnvelope>();
const replyTo = uniqueName('output-axis.replies');

beforeAll(async () => {
  process.env.NPU_FLEET_DEVICE = 'sim';
  for (const [name, m] of Object.entries(MODELS)) {
    mkdirSync(join(repo, name, '1'), { recursive: true });
    writeFileSync(
      join(repo, name, 'config.yaml'),
      [
        `name: ${name}`,
        `inputs: [{ name: x, dtype: float32, dims: [-1, ${m.width}] }]`,
        `outputs: [{ name: y, dtype: float32, dims: ${m.outputDims} }]`,
        'maxBatchSize: 8',
        'batchGears: [1, 2, 4, 8]',
        'priorityLevels: 1',
        'defaultPriority: 0',
        // Long enough for a burst to share batches, with gear padding past the members.
        'maxQueueDelayMs: [20]',
      ].join('\n'),
    );
    m.write(join(repo, name, '1', 'model.onnx'));
  }
  device = await openDevice(0);
  for (const name of Object.keys(MODELS) as ModelName[]) {
    oracles.set(name, await device.loadModel(join(repo, name, '1', 'model.onnx'), { gears: [1, 2, 3] }));
  }
  const broker = new MemoryBroker();
  const transport = new MemoryTransport({ broker });
  const config = parseFleetConfig({ devices: { count: 1, backend: 'sim' }, modelRepository: repo, worker: { metricsPort: 0 } });
  worker = new DeviceWorker({
    config,
    deviceId: 0,
    device,
    transport,
    metrics: new FleetMetrics({ processMetrics: false }),
    log: createLogger({ level: 'warn' }),
    snapshot: scanRepository(repo, { artifact: 'onnx' }),
  });
  await worker.start();
  producer = new MemoryProducer({ broker });
  await producer.subscribeReplies(replyTo, (r) => results.set(r.id, r));
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

describe('a worker splits an output along its config.yaml batch axis', () => {
  it.each(Object.keys(MODELS) as ModelName[])('%s: each request gets what the model gives it alone, in shared batches', async (model) => {
    const { width } = MODELS[model];
    const counts = [1, 1, 2, 3, 1, 2, 1, 3, 2, 1, 1, 1];
    const reqs: RequestEnvelope[] = counts.map((n, i) => ({
      id: `${model}-${i}`,
      model,
      createdAt: Date.now(),
      replyTo,
      inputs: [{ name: 'x', dtype: 'float32', shape: [n, width], data: new Uint8Array(Float32Array.from({ length: n * width }, (_, k) => 100 * i + k + 1).buffer) }],
    }));
    await producer.publish(reqs);
    await until(() => reqs.every((r) => results.has(r.id)), 20_000, () => `missing: ${reqs.filter((r) => !results.has(r.id)).map((r) => r.id).join(',')}`);
    const oracle = oracles.get(model) as LoadedModel;
    let shared = 0;
    for (const req of reqs) {
      const got = results.get(req.id) as ResultEnvelope;
      expect(got.status, `${req.id}: ${JSON.stringify(got.error)}`).toBe('ok');
      const input = req.inputs[0]!;
      const n = input.shape[0] as number;
      const want = await oracle.execute([{ data: input.data, dims: [...input.shape] }], n);
      expect(got.outputs?.[0]?.shape, req.id).toEqual(want.outputs[0]?.dims);
      expect(got.outputs?.[0]?.shape, req.id).toEqual(model === 'flatten' ? [n * width] : [width, n]);
      expect([...new Uint8Array(got.outputs?.[0]?.data ?? [])], req.id).toEqual([...new Uint8Array(want.outputs[0]!.data)]);
      if (got.batchSize > n) shared++;
    }
    // The split across requests is what is checked: most requests must have shared a batch.
    expect(shared).toBeGreaterThan(counts.length / 2);
  });
});
