/**
 * Gear output dims from a library that updates a model's current output dims only when an
 * execution runs, not at aclmdlSetDynamicBatchSize (the simulator's `curdimsatrun` fault plays
 * it). At load the binding then runs one synchronous execute per gear on zeroed inputs and reads
 * aclmdlGetCurOutputDims after each; read after the setter alone, the dims would be the
 * description's (-1s) and the transposed output could not be served. Faults are read when the
 * simulator initialises, hence this file's own process.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';
// Device 1's 4th execution fails: with gears 1/2/4 that is the first batch served after its load.
process.env['NPU_FLEET_SIM_FAULTS'] = 'dev0:curdimsatrun,dev1:curdimsatrun,dev1:fail@4';

import { openDevice, type Device } from '../../../src/device/index.ts';
import { asF32, f32Bytes, ramp } from '../support/tiny-models.ts';
import { flattenModel, GEARS, transposed, transposeModel } from '../../helpers/gear-output-models.ts';

describe('gear output dims from a library that updates them at execution', () => {
  let device: Device;
  beforeAll(async () => {
    device = await openDevice(0);
  });
  afterAll(async () => {
    if (!device.closed) await device.close();
  });

  it('serves flattened and transposed outputs of every gear, with both slots busy', async () => {
    const flat = await device.loadModel(flattenModel(), { gears: [1, 2, 4] });
    const trans = await device.loadModel(transposeModel(), { gears: [1, 2, 4] });
    try {
      const runs = GEARS.map((gear, i) => {
        const x4 = ramp(gear * 4, i * 10);
        const x3 = ramp(gear * 3, i * 10 + 5);
        return {
          gear,
          x4,
          x3,
          flat: flat.execute([{ data: f32Bytes(x4), dims: [gear, 4] }], gear),
          trans: trans.execute([{ data: f32Bytes(x3), dims: [gear, 3] }], gear),
        };
      });
      for (const run of runs) {
        const [f, t] = await Promise.all([run.flat, run.trans]);
        expect(f.outputs[0]?.dims).toEqual([run.gear * 4]);
        expect(Array.from(asF32(f.outputs[0]!.data))).toEqual(Array.from(run.x4));
        expect(t.outputs[0]?.dims).toEqual([3, run.gear]);
        expect(Array.from(asF32(t.outputs[0]!.data))).toEqual(transposed(run.x3, run.gear, 3));
      }
    } finally {
      await flat.unload();
      await trans.unload();
    }
  });

  it('costs one execution per gear at load: the first batch served is the device\'s 4th', async () => {
    const other = await openDevice(1);
    try {
      const model = await other.loadModel(transposeModel(), { gears: [1, 2, 4] });
      const x = ramp(6, 1);
      const first = await model.execute([{ data: f32Bytes(x), dims: [2, 3] }], 2).catch((e: unknown) => e);
      expect(first).toMatchObject({ name: 'FleetError' });
      expect(String((first as Error).message)).toMatch(/injected fault 'dev1:fail@4'/);
      const second = await model.execute([{ data: f32Bytes(x), dims: [2, 3] }], 2);
      expect(second.outputs[0]?.dims).toEqual([3, 2]);
      expect(Array.from(asF32(second.outputs[0]!.data))).toEqual(transposed(x, 2, 3));
    } finally {
      await other.close();
    }
  });
});
