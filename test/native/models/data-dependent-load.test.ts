/**
 * The simulator validates a model at load by running it on zero-filled inputs. A model whose
 * shapes follow input values (here a Reshape target taken from an int64 input, which the zeros
 * make impossible) must still load through the binding, describe that output as dynamic, and run.
 * The model is range-dynamic (x has a dynamic length), so the binding reads output shapes after
 * each run; data-dependent-static-outputs.test.ts covers a model whose inputs are all fixed-size.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';

import { attr, encodeModel } from '../../../scripts/onnx/onnx-model.ts';
import { i64 } from '../../../scripts/onnx/tensors.ts';
import { loadAddon, type RawDevice } from '../../../src/device/native-addon.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { asF32, f32Bytes, ramp } from '../support/tiny-models.ts';

/** y = Reshape(x [1, len], [rows, 4]) with rows an int64 input. */
function reshapeByInputModel(): string {
  const path = join(tempDir('npu-fleet-data-dep-'), 'reshape-by-input.onnx');
  const bytes = encodeModel({
    graph: {
      name: 'reshape-by-input',
      nodes: [
        { opType: 'Concat', inputs: ['rows', 'four'], outputs: ['shape'], attributes: { axis: attr.i(0) } },
        { opType: 'Reshape', inputs: ['x', 'shape'], outputs: ['y'] },
      ],
      inputs: [
        { name: 'x', dtype: 'float32', dims: [1, 'len'] },
        { name: 'rows', dtype: 'int64', dims: [1] },
      ],
      outputs: [{ name: 'y', dtype: 'float32', dims: ['rows', 4] }],
      initializers: [i64('four', [1], [4])],
    },
    irVersion: 8,
    opsetImports: [{ domain: '', version: 17 }],
  });
  writeFileSync(path, bytes);
  return path;
}

describe('loading a model whose shapes depend on input values', () => {
  let raw: RawDevice;
  beforeAll(async () => {
    raw = await loadAddon().openDevice(0);
  });
  afterAll(async () => {
    await raw.close();
  });

  it('loads, reports the data-dependent output dim as -1, and runs on real data', async () => {
    const model = await raw.loadModel(reshapeByInputModel(), [1], { x: [1, 12] }, 1, { y: [3, 4] });
    try {
      expect(model.info.outputs[0]?.dims).toEqual([-1, 4]);
      const rows = new Uint8Array(new BigInt64Array([3n]).buffer);
      const result = await model.execute(
        [
          { data: f32Bytes(ramp(12)), dims: [1, 12] },
          { data: rows, dims: [1] },
        ],
        1,
        0,
      );
      const y = result.outputs[0];
      expect(y?.dims).toEqual([3, 4]);
      expect(Array.from(asF32(y?.data ?? new Uint8Array()))).toEqual(Array.from(ramp(12)));
    } finally {
      await model.unload();
    }
  });
});
