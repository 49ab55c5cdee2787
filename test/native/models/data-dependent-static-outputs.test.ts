/**
 * A model whose inputs all have fixed sizes can still have an output whose shape follows input
 * values (here a Reshape target taken from an int64 input): its description says -1 for that dim.
 * The binding must read the real dims after each run rather than return the description's.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';

import { encodeModel } from '../../../scripts/onnx/onnx-model.ts';
import { loadAddon, type RawDevice } from '../../../src/device/native-addon.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { asF32, f32Bytes, ramp } from '../support/tiny-models.ts';

/** y = Reshape(x [1, 12], shape) with shape an int64 input [2]; z = Relu(x), fixed [1, 12]. */
function staticInputsReshapeModel(): string {
  const path = join(tempDir('npu-fleet-data-dep-static-'), 'reshape-static-inputs.onnx');
  const bytes = encodeModel({
    graph: {
      name: 'reshape-static-inputs',
      nodes: [
        { opType: 'Reshape', inputs: ['x', 'shape'], outputs: ['y'] },
        { opType: 'Relu', inputs: ['x'], outputs: ['z'] },
      ],
      inputs: [
        { name: 'x', dtype: 'float32', dims: [1, 12] },
        { name: 'shape', dtype: 'int64', dims: [2] },
      ],
      outputs: [
        { name: 'y', dtype: 'float32', dims: ['rows', 'cols'] },
        { name: 'z', dtype: 'float32', dims: [1, 12] },
      ],
    },
    irVersion: 8,
    opsetImports: [{ domain: '', version: 17 }],
  });
  writeFileSync(path, bytes);
  return path;
}

function shapeBytes(rows: bigint, cols: bigint): Uint8Array {
  return new Uint8Array(new BigInt64Array([rows, cols]).buffer);
}

describe('a model with fixed-size inputs and a data-dependent output', () => {
  let raw: RawDevice;
  beforeAll(async () => {
    raw = await loadAddon().openDevice(0);
  });
  afterAll(async () => {
    await raw.close();
  });

  it('returns the dims of each run for that output, and the fixed dims for the other', async () => {
    const model = await raw.loadModel(staticInputsReshapeModel(), [1], {}, 1, { y: [12, 12] });
    try {
      expect(model.info.outputs[0]?.dims).toEqual([-1, -1]);
      expect(model.info.outputs[1]?.dims).toEqual([1, 12]);
      const x = { data: f32Bytes(ramp(12)), dims: [1, 12] };
      for (const [rows, cols] of [
        [3, 4],
        [6, 2],
        [12, 1],
      ] as const) {
        const shape = { data: shapeBytes(BigInt(rows), BigInt(cols)), dims: [2] };
        const result = await model.execute([x, shape], 1, 0);
        const [y, z] = result.outputs;
        expect(y?.dims).toEqual([rows, cols]);
        expect(Array.from(asF32(y?.data ?? new Uint8Array()))).toEqual(Array.from(ramp(12)));
        expect(z?.dims).toEqual([1, 12]);
        expect(Array.from(asF32(z?.data ?? new Uint8Array()))).toEqual(Array.from(ramp(12)).map((v) => Math.max(v, 0)));
      }
    } finally {
      await model.unload();
    }
  });
});
