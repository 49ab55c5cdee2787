/**
 * The binding end to end against the bundled simulator: description of a loaded model, correct
 * outputs at every gear, two-slot pipelining under concurrency, timings, memory accounting.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';

import { backendInfo, openDevice, type Device } from '../../src/device/index.ts';
import { affine, affineModel, affineRangeModel, asF32, EXAMPLE_MLP, f32Bytes, ramp, rowMeanModel } from './support/tiny-models.ts';

describe('native binding over the simulator', () => {
  let device: Device;
  beforeAll(async () => {
    device = await openDevice(0);
  });
  afterAll(async () => {
    if (!device.closed) await device.close();
  });

  it('reports the simulator backend and its devices', () => {
    const info = backendInfo();
    expect(info.kind).toBe('sim');
    expect(info.libraryPath).toMatch(/libacl_sim\.so$/);
    expect(info.deviceCount).toBeGreaterThanOrEqual(2);
  });

  it('describes a dynamic-batch model and hides the dynamic-batch input', async () => {
    const model = await device.loadModel(affineModel(4), { gears: [1, 2, 8] });
    try {
      expect(model.dynamic).toBe('batch');
      expect(model.gears).toEqual([1, 2, 8]);
      expect(model.inputs).toEqual([{ name: 'x', dtype: 'float32', dims: [-1, 4] }]);
      expect(model.outputs).toEqual([{ name: 'y', dtype: 'float32', dims: [-1, 4] }]);
      expect(model.deviceMemoryBytes).toBeGreaterThanOrEqual(2 * 2 * 8 * 4 * 4); // 2 slots × in+out at gear 8
    } finally {
      await model.unload();
    }
  });

  it('computes correct outputs at batch 1 and at the largest gear, with timings', async () => {
    const model = await device.loadModel(affineModel(4), { gears: [1, 4, 16] });
    try {
      for (const gear of [1, 4, 16]) {
        const x = ramp(gear * 4, gear);
        const r = await model.execute([{ data: f32Bytes(x), dims: [gear, 4] }], gear);
        expect(r.outputs).toHaveLength(1);
        expect(r.outputs[0]?.dims).toEqual([gear, 4]);
        expect(Array.from(asF32(r.outputs[0]!.data))).toEqual(Array.from(affine(x)));
        expect(r.timings.copyInMs).toBeGreaterThanOrEqual(0);
        expect(r.timings.executeMs).toBeGreaterThanOrEqual(0);
        expect(r.timings.copyOutMs).toBeGreaterThanOrEqual(0);
        expect(r.overran).toBe(false);
      }
    } finally {
      await model.unload();
    }
  });

  it('keeps results apart when many executions are in flight on both slots', async () => {
    const model = await device.loadModel(affineModel(8), { gears: [1, 2, 4] });
    try {
      const runs = Array.from({ length: 64 }, (_, i) => {
        const gear = [1, 2, 4][i % 3]!;
        const x = ramp(gear * 8, i * 7);
        return { x, promise: model.execute([{ data: f32Bytes(x), dims: [gear, 8] }], gear) };
      });
      for (const { x, promise } of runs) {
        const r = await promise;
        expect(Array.from(asF32(r.outputs[0]!.data))).toEqual(Array.from(affine(x)));
      }
    } finally {
      await model.unload();
    }
  });

  it('runs the example MLP and sums each softmax row to 1', async () => {
    const model = await device.loadModel(EXAMPLE_MLP, { gears: [1, 2, 4, 8, 16, 32] });
    try {
      expect(model.inputs[0]).toEqual({ name: 'input', dtype: 'float32', dims: [-1, 64] });
      const r = await model.execute([{ data: f32Bytes(ramp(32 * 64)), dims: [32, 64] }], 32);
      expect(r.outputs[0]?.dims).toEqual([32, 10]);
      const probs = asF32(r.outputs[0]!.data);
      for (let row = 0; row < 32; row++) {
        const sum = probs.subarray(row * 10, row * 10 + 10).reduce((a, b) => a + b, 0);
        expect(sum).toBeCloseTo(1, 5);
      }
    } finally {
      await model.unload();
    }
  });

  it('accounts device memory: load takes it, unload gives all of it back', async () => {
    const before = await device.memInfo();
    const model = await device.loadModel(affineModel(256), { gears: [1, 64], slots: 2 });
    const loaded = await device.memInfo();
    expect(before.freeBytes - loaded.freeBytes).toBe(model.deviceMemoryBytes);
    expect(model.deviceMemoryBytes).toBeGreaterThanOrEqual(2 * 2 * 64 * 256 * 4);
    await model.execute([{ data: f32Bytes(ramp(64 * 256)), dims: [64, 256] }], 64);
    await model.unload();
    expect((await device.memInfo()).freeBytes).toBe(before.freeBytes);
  });

  it('allocates one slot when asked (slots: 1) and still pipelines correctly', async () => {
    const two = await device.loadModel(affineModel(128), { gears: [32], slots: 2 });
    const one = await device.loadModel(affineModel(128), { gears: [32], slots: 1 });
    try {
      expect(one.slots).toBe(1);
      expect(one.deviceMemoryBytes).toBeLessThan(two.deviceMemoryBytes);
      const xs = [0, 1, 2, 3].map((i) => ramp(32 * 128, i));
      const results = await Promise.all(xs.map((x) => one.execute([{ data: f32Bytes(x), dims: [32, 128] }], 32)));
      results.forEach((r, i) => expect(Array.from(asF32(r.outputs[0]!.data))).toEqual(Array.from(affine(xs[i]!))));
    } finally {
      await one.unload();
      await two.unload();
    }
  });

  it('runs a range-dynamic model with per-execution input dims and reads output dims back', async () => {
    const model = await device.loadModel(rowMeanModel(), { gears: [1, 2, 4], maxInputDims: { x: [4, 64] } });
    try {
      expect(model.dynamic).toBe('range');
      expect(model.inputs[0]?.dims).toEqual([-1, -1]);
      expect(model.outputs[0]?.dims).toEqual([-1]);
      for (const [batch, len] of [
        [1, 3],
        [4, 64],
        [2, 17],
      ] as const) {
        const x = ramp(batch * len, len);
        const r = await model.execute([{ data: f32Bytes(x), dims: [batch, len] }], batch);
        expect(r.outputs[0]?.dims).toEqual([batch]);
        const means = Array.from({ length: batch }, (_, b) => x.subarray(b * len, (b + 1) * len).reduce((a, v) => a + v, 0) / len);
        asF32(r.outputs[0]!.data).forEach((v, b) => expect(v).toBeCloseTo(means[b]!, 4));
      }
      const tooLong = await model.execute([{ data: f32Bytes(ramp(65)), dims: [1, 65] }], 1).catch((e: unknown) => e);
      expect(tooLong).toMatchObject({ code: 'INVALID_ARGUMENT' });
    } finally {
      await model.unload();
    }
  });

  it('sizes dynamic non-batch outputs from maxOutputDims and returns their actual dims', async () => {
    const path = affineRangeModel();
    const missing = await device.loadModel(path, { gears: [2], maxInputDims: { x: [2, 32] } }).catch((e: unknown) => e);
    expect(missing).toMatchObject({ code: 'MODEL_LOAD_FAILED' });
    expect(String((missing as Error).message)).toMatch(/maxOutputDims\.y/);
    const model = await device.loadModel(path, { gears: [2], maxInputDims: { x: [2, 32] }, maxOutputDims: { y: [2, 32] } });
    try {
      for (const len of [5, 32, 1]) {
        const x = ramp(2 * len, len);
        const r = await model.execute([{ data: f32Bytes(x), dims: [2, len] }], 2);
        expect(r.outputs[0]?.dims).toEqual([2, len]);
        expect(Array.from(asF32(r.outputs[0]!.data))).toEqual(Array.from(affine(x)));
      }
    } finally {
      await model.unload();
    }
  });

  it('runs two devices independently', async () => {
    const other = await openDevice(1);
    try {
      const path = affineModel(4);
      const [a, b] = await Promise.all([device.loadModel(path, { gears: [2] }), other.loadModel(path, { gears: [2] })]);
      const x = ramp(8);
      const [ra, rb] = await Promise.all([a.execute([{ data: f32Bytes(x), dims: [2, 4] }], 2), b.execute([{ data: f32Bytes(x), dims: [2, 4] }], 2)]);
      expect(Array.from(asF32(ra.outputs[0]!.data))).toEqual(Array.from(affine(x)));
      expect(Array.from(asF32(rb.outputs[0]!.data))).toEqual(Array.from(affine(x)));
      await a.unload();
    } finally {
      await other.close(); // unloads b
    }
  });
});
