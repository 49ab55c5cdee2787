/**
 * Output dims of a dynamic-batch (gear) model. acl-api.md §4: outputs are sized by
 * aclmdlGetOutputSizeByIndex (the largest gear) and "after the setter, read the actual shape with
 * aclmdlGetCurOutputDims". An output's batch-driven dim is not always the leading one, nor equal
 * to the gear: a flattened output [batch x 4] or a transposed one [3, batch]. The binding derived
 * the dims from the description with the gear in dim 0 (so the flattened output came back as
 * [gear] with a quarter of its data) and refused the transposed one without maxOutputDims.
 * Both slots carry batches of different gears at once, so dims read for one batch after another
 * batch's setter (aclmdlGetCurOutputDims is per model) would show here too.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

process.env['NPU_FLEET_DEVICE'] = 'sim';

import { attr, encodeModel, type GraphDef } from '../../../scripts/onnx/onnx-model.ts';
import { i64 } from '../../../scripts/onnx/tensors.ts';
import { openDevice, type Device } from '../../../src/device/index.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { asF32, f32Bytes, ramp } from '../support/tiny-models.ts';

const dir = tempDir('npu-fleet-gear-out-dims-');

function write(name: string, graph: GraphDef): string {
  const path = join(dir, `${name}.onnx`);
  writeFileSync(path, encodeModel({ graph, irVersion: 8, opsetImports: [{ domain: '', version: 17 }] }));
  return path;
}

/** y = Reshape(x [batch, 4], [-1]): y has batch x 4 elements. */
function flattenModel(): string {
  return write('flatten', {
    name: 'flatten',
    nodes: [{ opType: 'Reshape', inputs: ['x', 'flat'], outputs: ['y'] }],
    inputs: [{ name: 'x', dtype: 'float32', dims: ['batch', 4] }],
    outputs: [{ name: 'y', dtype: 'float32', dims: ['n'] }],
    initializers: [i64('flat', [1], [-1])],
  });
}

/** y = Transpose(x [batch, 3]): y is [3, batch]. */
function transposeModel(): string {
  return write('transpose', {
    name: 'transpose',
    nodes: [{ opType: 'Transpose', inputs: ['x'], outputs: ['y'], attributes: { perm: attr.ints([1, 0]) } }],
    inputs: [{ name: 'x', dtype: 'float32', dims: ['batch', 3] }],
    outputs: [{ name: 'y', dtype: 'float32', dims: [3, 'batch'] }],
  });
}

function transposed(x: Float32Array, rows: number, cols: number): number[] {
  const out: number[] = [];
  for (let c = 0; c < cols; c++) for (let r = 0; r < rows; r++) out.push(x[r * cols + c]!);
  return out;
}

const GEARS = [4, 1, 2, 4, 1, 4, 2, 1];

describe('output dims of a dynamic-batch model', () => {
  let device: Device;
  beforeAll(async () => {
    device = await openDevice(0);
  });
  afterAll(async () => {
    if (!device.closed) await device.close();
  });

  it('gives a flattened output batch x 4 elements at every gear, with both slots busy', async () => {
    const model = await device.loadModel(flattenModel(), { gears: [1, 2, 4] });
    try {
      expect(model.dynamic).toBe('batch');
      const runs = GEARS.map((gear, i) => {
        const x = ramp(gear * 4, i * 10);
        return { gear, x, result: model.execute([{ data: f32Bytes(x), dims: [gear, 4] }], gear) };
      });
      for (const { gear, x, result } of runs) {
        const r = await result;
        expect(r.outputs[0]?.dims).toEqual([gear * 4]);
        expect(Array.from(asF32(r.outputs[0]!.data))).toEqual(Array.from(x));
      }
    } finally {
      await model.unload();
    }
  });

  it('loads a transposed output [3, batch] without maxOutputDims and gives each batch its dims', async () => {
    const model = await device.loadModel(transposeModel(), { gears: [1, 2, 4] });
    try {
      const runs = GEARS.map((gear, i) => {
        const x = ramp(gear * 3, i * 10);
        return { gear, x, result: model.execute([{ data: f32Bytes(x), dims: [gear, 3] }], gear) };
      });
      for (const { gear, x, result } of runs) {
        const r = await result;
        expect(r.outputs[0]?.dims).toEqual([3, gear]);
        expect(Array.from(asF32(r.outputs[0]!.data))).toEqual(transposed(x, gear, 3));
      }
    } finally {
      await model.unload();
    }
  });
});
