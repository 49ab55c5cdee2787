/**
 * Output dims of a dynamic-batch (gear) model. acl-api.md §4: outputs are sized by
 * aclmdlGetOutputSizeByIndex (the largest gear) and "after the setter, read the actual shape with
 * aclmdlGetCurOutputDims". An output's batch-driven dim is not always the leading one, nor equal
 * to the gear: a flattened output [batch x 4] or a transposed one [3, batch]. The binding derived
 * the dims from the description with the gear in dim 0 (so the flattened output came back as
 * [gear] with a quarter of its data) and refused the transposed one without maxOutputDims.
 * The current dims are the model's, not an execution's, so the binding learns them per gear at
 * load; both slots carry batches of different gears at once here, so dims read during serving
 * (f6db680, reverted in a242115) would show as another batch's.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';

import { openDevice, type Device } from '../../../src/device/index.ts';
import { asF32, f32Bytes, ramp } from '../support/tiny-models.ts';
import { flattenModel, GEARS, transposed, transposeModel } from '../../helpers/gear-output-models.ts';

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
