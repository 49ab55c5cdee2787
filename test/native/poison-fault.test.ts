/**
 * The simulator's data-triggered faults (`hang@value=V`, `fail@value=V`): the fault follows a poison
 * input into whichever execution carries it, as a request that reliably hangs a real NPU would.
 * Read when the simulator initialises, hence this file's own process.
 */
import { describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';
process.env['NPU_FLEET_SIM_FAULTS'] = 'dev0:fail@value=1337,dev0:hang@value=-7.5:400ms';

import { FleetError } from '../../src/errors/fleet-error.ts';
import { openDevice } from '../../src/device/index.ts';
import { affine, affineModel, asF32, f32Bytes, ramp } from './support/tiny-models.ts';

describe('data-triggered simulator faults', () => {
  it('fails or hangs exactly the executions whose first input holds the poison value, in any row', async () => {
    const device = await openDevice(0);
    const model = await device.loadModel(affineModel(4), { gears: [1, 2] });
    const clean = ramp(8, 1);
    const ok = await model.execute([{ data: f32Bytes(clean), dims: [2, 4] }], 2);
    expect(Array.from(asF32(ok.outputs[0]!.data))).toEqual(Array.from(affine(clean)));

    const poisoned = ramp(8, 1);
    poisoned[6] = 1337; // second row
    const failure = await model.execute([{ data: f32Bytes(poisoned), dims: [2, 4] }], 2).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(failure).toBeInstanceOf(FleetError);
    expect((failure as FleetError).message).toMatch(/injected fault 'dev0:fail@value=1337'/);

    const slow = ramp(4, 2);
    slow[0] = -7.5;
    const t0 = performance.now();
    const hung = await model.execute([{ data: f32Bytes(slow), dims: [1, 4] }], 1);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(350);
    expect(Array.from(asF32(hung.outputs[0]!.data))).toEqual(Array.from(affine(slow)));

    // The device is not left faulty: a clean input runs normally again.
    const again = await model.execute([{ data: f32Bytes(clean), dims: [2, 4] }], 2);
    expect(Array.from(asF32(again.outputs[0]!.data))).toEqual(Array.from(affine(clean)));
    await model.unload();
    await device.close();
  });
});
