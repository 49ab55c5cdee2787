/**
 * Differential test of the batch path: random requests (random sample counts, lengths, input
 * order) through the real scheduler → gatherInputs → the simulated binding → scatterOutputs,
 * compared with each request run alone through the binding. The acceptance bar: a request's
 * outputs are exactly what the binding gives it directly.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { attr, encodeModel, type GraphDef } from '../../../scripts/onnx/onnx-model.ts';
import { f32, i64 } from '../../../scripts/onnx/tensors.ts';
import { ModelConfigSchema, type ModelConfig } from '../../../src/contracts/model-config.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import type { Tensor } from '../../../src/contracts/tensor.ts';
import { openDevice, type Device } from '../../../src/device/index.ts';
import { gatherInputs, scatterOutputs } from '../../../src/runtime/batch-io.ts';
import { loadChecked, type ExecutableModel } from '../../../src/runtime/load-checked.ts';
import { schedulerOptionsFor } from '../../../src/runtime/model-lanes.ts';
import { validateForModel, type ValidatedRequest } from '../../../src/runtime/request-validation.ts';
import { BatchScheduler } from '../../../src/scheduler/batch-scheduler.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
// Per position, y = 2x + 1 over [batch, len]: a token-labelling shape, the output follows the length.
import { affineRangeModel } from '../../native/support/tiny-models.ts';

const dir = tempDir('npu-fleet-batch-diff-');

function writeModel(name: string, graph: GraphDef): string {
  const path = join(dir, `${name}.onnx`);
  writeFileSync(path, encodeModel({ graph, irVersion: 8, opsetImports: [{ domain: '', version: 17 }] }));
  return path;
}

/** Two inputs of different dtypes and element sizes, three outputs (float32 rows, int64 rows, a rank-1 sum). */
const MIXED_PATH = (): string =>
  writeModel('mixed', {
    name: 'mixed',
    nodes: [
      { opType: 'Mul', inputs: ['x', 'two'], outputs: ['x2'] },
      { opType: 'Add', inputs: ['x2', 'one'], outputs: ['y'] },
      { opType: 'Add', inputs: ['ids', 'five'], outputs: ['z'] },
      { opType: 'ReduceSum', inputs: ['x', 'axes'], outputs: ['s'], attributes: { keepdims: attr.i(0) } },
    ],
    inputs: [
      { name: 'x', dtype: 'float32', dims: ['batch', 3] },
      { name: 'ids', dtype: 'int64', dims: ['batch', 2] },
    ],
    outputs: [
      { name: 'y', dtype: 'float32', dims: ['batch', 3] },
      { name: 'z', dtype: 'int64', dims: ['batch', 2] },
      { name: 's', dtype: 'float32', dims: ['batch'] },
    ],
    initializers: [f32('two', [1], [2]), f32('one', [1], [1]), i64('five', [1], [5]), i64('axes', [1], [1])],
  });

/** Range-dynamic: per-row sum (padding with 0 cannot change it) over [batch, len] float32. */
const ROWSUM_PATH = (): string =>
  writeModel('row-sum', {
    name: 'row-sum',
    nodes: [{ opType: 'ReduceSum', inputs: ['x', 'axes'], outputs: ['s'], attributes: { keepdims: attr.i(0) } }],
    inputs: [{ name: 'x', dtype: 'float32', dims: ['batch', 'len'] }],
    outputs: [{ name: 's', dtype: 'float32', dims: ['batch'] }],
    initializers: [i64('axes', [1], [1])],
  });

const perPositionConfig = ModelConfigSchema.parse({
  name: 'per-position',
  inputs: [{ name: 'x', dtype: 'float32', dims: [-1, -1] }],
  outputs: [{ name: 'y', dtype: 'float32', dims: [-1, -1] }],
  maxBatchSize: 16,
  batchGears: [1, 2, 4, 8, 16],
  priorityLevels: 2,
  defaultPriority: 1,
  maxQueueDelayMs: [0, 0],
  buckets: { input: 'x', axis: 1, bounds: [4, 8, 16], padValue: 0 },
});

const mixedConfig = ModelConfigSchema.parse({
  name: 'mixed',
  inputs: [
    { name: 'x', dtype: 'float32', dims: [-1, 3] },
    { name: 'ids', dtype: 'int64', dims: [-1, 2] },
  ],
  outputs: [
    { name: 'y', dtype: 'float32', dims: [-1, 3] },
    { name: 'z', dtype: 'int64', dims: [-1, 2] },
    { name: 's', dtype: 'float32', dims: [-1] },
  ],
  maxBatchSize: 16,
  batchGears: [1, 2, 4, 8, 16],
  priorityLevels: 2,
  defaultPriority: 1,
  maxQueueDelayMs: [0, 0],
});

const rowSumConfig = ModelConfigSchema.parse({
  name: 'row-sum',
  inputs: [{ name: 'x', dtype: 'float32', dims: [-1, -1] }],
  outputs: [{ name: 's', dtype: 'float32', dims: [-1] }],
  maxBatchSize: 16,
  batchGears: [1, 2, 4, 8, 16],
  priorityLevels: 2,
  defaultPriority: 1,
  maxQueueDelayMs: [0, 0],
  buckets: { input: 'x', axis: 1, bounds: [4, 8, 16], padValue: 0 },
});

/** Deterministic xorshift. */
function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32;
  };
}
const int = (r: () => number, lo: number, hi: number): number => lo + Math.floor(r() * (hi - lo + 1));

function f32Tensor(name: string, shape: number[], r: () => number): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  // Small integers: sums are exact in float32, so batched and alone must agree bit for bit.
  const v = Float32Array.from({ length: n }, () => int(r, -50, 50));
  return { name, dtype: 'float32', shape, data: new Uint8Array(v.buffer) };
}

function i64Tensor(name: string, shape: number[], r: () => number): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  const v = BigInt64Array.from({ length: n }, () => BigInt(int(r, -1e6, 1e6)) * 4096n);
  return { name, dtype: 'int64', shape, data: new Uint8Array(v.buffer) };
}

function request(id: string, inputs: Tensor[]): RequestEnvelope {
  return { id, model: 'm', inputs, createdAt: 0 } as unknown as RequestEnvelope;
}

/** What the batches looked like, so the comparison is known to cover shared and padded batches. */
const seen = { shared: 0, gearPadded: 0, lengthPadded: 0 };

/** Runs every request through the scheduler and the binding as the worker does; outputs by id. */
async function batched(model: ExecutableModel, config: ModelConfig, requests: RequestEnvelope[], r: () => number): Promise<Map<string, Tensor[]>> {
  const scheduler = new BatchScheduler<{ request: RequestEnvelope; validated: ValidatedRequest }>(schedulerOptionsFor(config));
  const out = new Map<string, Tensor[]>();
  let now = 1_000;
  const pending = [...requests];
  while (pending.length > 0 || scheduler.queuedRequests > 0) {
    // A few arrivals, then one decision: batches of mixed sizes and buckets.
    for (let k = int(r, 0, 6); k > 0 && pending.length > 0; k--) {
      const req = pending.shift() as RequestEnvelope;
      const v = validateForModel(req, config);
      const verdict = scheduler.enqueue({ id: req.id, priority: v.priority, items: v.items, arrivedAt: now, length: v.length, payload: { request: req, validated: v } });
      expect(verdict.kind).toBe('accepted');
    }
    now += int(r, 0, 3);
    const d = scheduler.decide(now);
    if (d.kind !== 'dispatch') continue;
    const batch = d.batch;
    const members = batch.members.map((m) => m.payload.request);
    if (members.length > 1) seen.shared++;
    if (batch.paddedItems > 0) seen.gearPadded++;
    if (batch.paddedLengthSlots > 0) seen.lengthPadded++;
    const inputs = gatherInputs(members, config, batch);
    const { outputs } = await model.execute(inputs, batch.gear);
    const perRequest = scatterOutputs(outputs, config, batch);
    scheduler.recordCompletion(batch.gear, 1, now);
    // Copies: the views share the batch's output buffers.
    batch.members.forEach((m, i) => out.set(m.id, (perRequest[i] ?? []).map((t) => ({ ...t, data: Uint8Array.from(t.data) }))));
  }
  return out;
}

/** The oracle: one request alone, at exactly its own sample count and length. */
async function alone(model: ExecutableModel, config: ModelConfig, req: RequestEnvelope): Promise<Tensor[]> {
  const n = req.inputs[0]?.shape[0] as number;
  const inputs = config.inputs.map((spec) => {
    const t = req.inputs.find((x) => x.name === spec.name) as Tensor;
    return { data: t.data, dims: [...t.shape] };
  });
  const { outputs } = await model.execute(inputs, n);
  return outputs.map((o, j) => ({ name: config.outputs[j]?.name ?? '', dtype: config.outputs[j]?.dtype ?? 'float32', shape: [...o.dims], data: Uint8Array.from(o.data) }));
}

let device: Device;
beforeAll(async () => {
  process.env.NPU_FLEET_DEVICE = 'sim';
  device = await openDevice(0);
});
afterAll(async () => {
  await device?.close();
  expect(seen.shared).toBeGreaterThan(10);
  expect(seen.gearPadded).toBeGreaterThan(10);
  expect(seen.lengthPadded).toBeGreaterThan(10);
});

const allGears = Array.from({ length: 16 }, (_, i) => i + 1);

/**
 * Loads `path` as a worker does and as a per-request oracle (`oracleDims`: its buffer bounds), then
 * for each seed runs 60 random requests both ways and compares every output byte for byte.
 */
async function compareWithAlone(
  path: string,
  config: ModelConfig,
  oracleDims: { maxInputDims?: Record<string, number[]>; maxOutputDims?: Record<string, number[]> },
  seeds: number[],
  make: (r: () => number, id: string) => RequestEnvelope,
  check: (req: RequestEnvelope, want: Tensor[]) => void = () => {},
): Promise<void> {
  const model = await loadChecked(device, path, config, config.name);
  const oracle = await device.loadModel(path, { gears: allGears, ...oracleDims });
  try {
    for (const seed of seeds) {
      const r = rng(seed);
      const reqs = Array.from({ length: 60 }, (_, i) => make(r, `s${seed}-r${i}`));
      const got = await batched(model, config, reqs, r);
      for (const req of reqs) {
        const want = await alone(oracle, config, req);
        check(req, want);
        const have = got.get(req.id);
        expect(have?.map((t) => ({ ...t, data: [...t.data] })), req.id).toEqual(want.map((t) => ({ ...t, data: [...t.data] })));
      }
    }
  } finally {
    await model.unload();
    await oracle.unload();
  }
}

/** One float32 input [n, len] with random samples and lengths up to the largest bound (16). */
const lengthRequest = (r: () => number, id: string): RequestEnvelope => request(id, [f32Tensor('x', [int(r, 1, 6), int(r, 1, 16)], r)]);

describe('batched outputs equal the binding called per request', () => {
  it('two inputs (float32, int64), three outputs, mixed sample counts, inputs in any order', async () => {
    await compareWithAlone(MIXED_PATH(), mixedConfig, {}, [1, 2, 3, 4], (r, id) => {
      const n = int(r, 1, r() < 0.2 ? 16 : 5);
      const inputs = [f32Tensor('x', [n, 3], r), i64Tensor('ids', [n, 2], r)];
      return request(id, r() < 0.5 ? inputs : inputs.reverse());
    });
  });

  it('bucketed lengths: padded positions and padding rows never reach a result', async () => {
    await compareWithAlone(ROWSUM_PATH(), rowSumConfig, { maxInputDims: { x: [16, 16] } }, [5, 6, 7], lengthRequest);
  });

  it("bucketed per-position outputs come back at each request's own length, never the bucket's", async () => {
    await compareWithAlone(affineRangeModel(), perPositionConfig, { maxInputDims: { x: [16, 16] }, maxOutputDims: { y: [16, 16] } }, [8, 9, 10], lengthRequest, (req, want) =>
      expect(want[0]?.shape).toEqual(req.inputs[0]?.shape),
    );
  });
});
