/**
 * Overrun semantics (DESIGN §5): an execution past its timeout is not cancelled. It keeps its slot
 * until the device finishes, then resolves with correct outputs (overran: true); device memory
 * returns to baseline; unload and close wait for work in flight. Faults are injected by the
 * simulator (NPU_FLEET_SIM_FAULTS), read when it initialises, hence this file's own process.
 */
import { describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';
// Device 0: the 2nd execution hangs 600 ms, the 5th fails, the 7th hangs 400 ms.
// Device 1: the 1st hangs 500 ms.
process.env['NPU_FLEET_SIM_FAULTS'] = 'dev0:hang@2:600ms,dev0:fail@5,dev0:hang@7:400ms,dev1:hang@1:500ms';

import { FleetError } from '../../src/errors/fleet-error.ts';
import { openDevice } from '../../src/device/index.ts';
import { affine, affineModel, asF32, f32Bytes, ramp } from './support/tiny-models.ts';

describe('overrun and device faults', () => {
  it('resolves a hung execution late with correct outputs and frees its memory afterwards', async () => {
    const device = await openDevice(0);
    const baseline = await device.memInfo();
    const model = await device.loadModel(affineModel(4), { gears: [1, 2] });
    const x1 = ramp(4, 1);
    const x2 = ramp(8, 2);
    const x3 = ramp(8, 3);

    const first = await model.execute([{ data: f32Bytes(x1), dims: [1, 4] }], 1, { timeoutMs: 100 });
    expect(first.overran).toBe(false);

    const t0 = performance.now();
    const hung = model.execute([{ data: f32Bytes(x2), dims: [2, 4] }], 2, { timeoutMs: 100 });
    const queued = model.execute([{ data: f32Bytes(x3), dims: [2, 4] }], 2, { timeoutMs: 100 });
    // While the device hangs, the device thread still answers (memInfo shows the slots in use).
    const during = await device.memInfo();
    expect(during.freeBytes).toBeLessThan(baseline.freeBytes);

    const r2 = await hung;
    expect(performance.now() - t0).toBeGreaterThanOrEqual(550);
    expect(r2.overran).toBe(true);
    expect(Array.from(asF32(r2.outputs[0]!.data))).toEqual(Array.from(affine(x2)));
    const r3 = await queued;
    expect(Array.from(asF32(r3.outputs[0]!.data))).toEqual(Array.from(affine(x3)));

    // The 5th execution fails on the device: a typed error with the ACL code, then all is well.
    await model.execute([{ data: f32Bytes(x1), dims: [1, 4] }], 1);
    const failure = await model.execute([{ data: f32Bytes(x1), dims: [1, 4] }], 1).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(failure).toBeInstanceOf(FleetError);
    expect((failure as FleetError).details['aclError']).toEqual(expect.any(Number));
    const after = await model.execute([{ data: f32Bytes(x1), dims: [1, 4] }], 1);
    expect(Array.from(asF32(after.outputs[0]!.data))).toEqual(Array.from(affine(x1)));

    // unload() right after a (hanging) execute waits for it; the execute still succeeds.
    let executedAt = 0;
    const t1 = performance.now();
    const last = model.execute([{ data: f32Bytes(x2), dims: [2, 4] }], 2).then((r) => {
      executedAt = performance.now();
      return r;
    });
    await model.unload();
    const unloadedAt = performance.now();
    expect(unloadedAt - t1).toBeGreaterThanOrEqual(350);
    expect(executedAt).toBeGreaterThan(0);
    expect(executedAt).toBeLessThanOrEqual(unloadedAt);
    expect(Array.from(asF32((await last).outputs[0]!.data))).toEqual(Array.from(affine(x2)));
    expect((await device.memInfo()).freeBytes).toBe(baseline.freeBytes);
    await device.close();
  });

  it('makes unload and close wait for the execution in flight', async () => {
    const device = await openDevice(1);
    const model = await device.loadModel(affineModel(4), { gears: [1] });
    const x = ramp(4, 9);
    const t0 = performance.now();
    let resolvedAt = 0;
    const hung = model.execute([{ data: f32Bytes(x), dims: [1, 4] }], 1).then((r) => {
      resolvedAt = performance.now();
      return r;
    });
    const closing = device.close(); // unloads the model once the hang ends
    await closing;
    const closedAt = performance.now();
    expect(closedAt - t0).toBeGreaterThanOrEqual(450);
    const r = await hung;
    expect(resolvedAt).toBeGreaterThan(0);
    expect(resolvedAt).toBeLessThanOrEqual(closedAt);
    expect(Array.from(asF32(r.outputs[0]!.data))).toEqual(Array.from(affine(x)));
  });
});
