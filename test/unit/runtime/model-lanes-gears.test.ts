import { describe, expect, it } from 'vitest';
import { parseModelConfig } from '../../../src/contracts/config-loader.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { loadChecked, type DeviceLike, type ExecutableModel } from '../../../src/runtime/load-checked.ts';
import type { ModelTensorSpec } from '../../../src/runtime/model-io-check.ts';

const config = parseModelConfig({
  name: 'm',
  inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }],
  outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 4] }],
  maxBatchSize: 8,
  batchGears: [1, 2, 4, 8],
});

/**
 * A device whose model reports its own gears, as a real .om does (aclmdlGetDynamicBatch reads
 * the gears it was compiled with; the loadModel option only reaches the simulator). Its execute
 * refuses other gears, as the binding does.
 */
function deviceWithModelGears(gears: number[], inputs: readonly ModelTensorSpec[] = config.inputs) {
  const state = { unloaded: 0, executed: [] as number[] };
  const device: DeviceLike = {
    id: 0,
    memInfo: () => Promise.resolve({ freeBytes: 1, totalBytes: 2 }),
    close: () => Promise.resolve(),
    loadModel: (): Promise<ExecutableModel> =>
      Promise.resolve({
        gears,
        inputs,
        outputs: config.outputs,
        execute(_inputs, gear) {
          if (!gears.includes(gear)) return Promise.reject(new FleetError('INVALID_ARGUMENT', `execute: gear ${gear} is not one of the model's gears [${gears.join(', ')}]`));
          state.executed.push(gear);
          return Promise.resolve({ outputs: [{ data: new Uint8Array(gear * 16), dims: [gear, 4] }], timings: { copyInMs: 0, executeMs: 0, copyOutMs: 0 } });
        },
        unload() {
          state.unloaded++;
          return Promise.resolve();
        },
      }),
  };
  return { device, state };
}

describe('loadChecked: batch gears', () => {
  it('accepts a model that takes every gear the config batches to', async () => {
    const { device } = deviceWithModelGears([1, 2, 4, 8, 16]);
    await expect(loadChecked(device, '/m/1/model.om', config, 'm version 1')).resolves.toBeDefined();
  });

  it('refuses a model compiled without a gear the config batches to (every batch of that gear would fail)', async () => {
    const { device, state } = deviceWithModelGears([1, 4, 8]);
    const err = await loadChecked(device, '/m/1/model.om', config, 'm version 1').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FleetError);
    expect((err as FleetError).code).toBe('MODEL_LOAD_FAILED');
    expect((err as FleetError).message).toMatch(/batchGears \[1, 2, 4, 8\].*2.*\[1, 4, 8\]/);
    expect(state.unloaded).toBe(1);
  });
});

describe('loadChecked: an input whose batch axis the model fixes', () => {
  const twoInputs = parseModelConfig({
    name: 'm',
    inputs: [
      { name: 'a', dtype: 'float32', dims: [-1, 4] },
      { name: 'b', dtype: 'float32', dims: [-1, 4] },
    ],
    outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 4] }],
    maxBatchSize: 4,
    batchGears: [1, 2, 4],
  });
  const tensors = (a: number[], b: number[]): ModelTensorSpec[] => [
    { name: 'a', dtype: 'float32', dims: a },
    { name: 'b', dtype: 'float32', dims: b },
  ];

  it('refuses a dynamic-batch model with one input fixed at [1, 4] (every batch of 2 or 4 items would fail)', async () => {
    // An ONNX model Add(a: [N, 4], b: [1, 4]): the simulator loads it as a dynamic-batch model
    // reporting b as [1, 4]; config.yaml's [-1, 4] for b passed the tensor check (axis 0 is not
    // compared), and the worker then failed every batch padded to gear 2 or 4.
    const { device, state } = deviceWithModelGears([1, 2, 4], tensors([-1, 4], [1, 4]));
    const err = await loadChecked(device, '/m/1/model.onnx', twoInputs, 'm version 1').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FleetError);
    expect((err as FleetError).code).toBe('MODEL_LOAD_FAILED');
    expect((err as FleetError).message).toMatch(/inputs\[1\] b: the model fixes its batch axis 0 at 1 .*batchGears \[1, 2, 4\].*2, 4 items would fail/);
    expect(state.unloaded).toBe(1);
  });

  it('accepts a static model whose fixed batch is the only gear', async () => {
    const single = parseModelConfig({ ...twoInputs, maxBatchSize: 4, batchGears: [4] });
    const { device } = deviceWithModelGears([4], tensors([4, 4], [4, 4]));
    await expect(loadChecked(device, '/m/1/model.onnx', single, 'm version 1')).resolves.toBeDefined();
  });

  it('reports a static model whose batch is not every gear once, as a missing gear', async () => {
    const { device } = deviceWithModelGears([1], tensors([1, 4], [1, 4]));
    const err = (await loadChecked(device, '/m/1/model.onnx', twoInputs, 'm version 1').catch((e: unknown) => e)) as FleetError;
    expect(err.message).toMatch(/batchGears \[1, 2, 4\] include 2, 4/);
    expect(err.message).not.toMatch(/fixes its batch axis/);
  });
});
