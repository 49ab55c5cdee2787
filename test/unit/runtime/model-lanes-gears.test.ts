import { describe, expect, it } from 'vitest';
import { parseModelConfig } from '../../../src/contracts/config-loader.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { loadChecked, type DeviceLike, type ExecutableModel } from '../../../src/runtime/load-checked.ts';

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
function deviceWithModelGears(gears: number[]) {
  const state = { unloaded: 0, executed: [] as number[] };
  const device: DeviceLike = {
    id: 0,
    memInfo: () => Promise.resolve({ freeBytes: 1, totalBytes: 2 }),
    close: () => Promise.resolve(),
    loadModel: (): Promise<ExecutableModel> =>
      Promise.resolve({
        gears,
        inputs: config.inputs,
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
