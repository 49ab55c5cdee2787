/**
 * Allocation past the simulated device's capacity is a typed, retriable DEVICE_OUT_OF_MEMORY error
 * carrying the ACL code; a failed load leaves no memory behind. Own file: the capacity is read from
 * the environment when the simulator initialises.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';
process.env['NPU_FLEET_SIM_DEVICE_MEMORY_BYTES'] = String(8 * 1024 * 1024);

import { FleetError } from '../../src/errors/fleet-error.ts';
import { openDevice, type Device } from '../../src/device/index.ts';
import { affineModel, f32Bytes, ramp } from './support/tiny-models.ts';

describe('device memory capacity', () => {
  let device: Device;
  beforeAll(async () => {
    device = await openDevice(0);
  });
  afterAll(async () => {
    await device.close();
  });

  it('fails a load whose buffers exceed the capacity, then recovers fully', async () => {
    const { totalBytes, freeBytes } = await device.memInfo();
    expect(totalBytes).toBe(8 * 1024 * 1024);
    // 2 slots × (input + output) × 4096 × 256 float32 = 16 MiB > 8 MiB.
    const error = await device.loadModel(affineModel(256), { gears: [4096] }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(FleetError);
    const e = error as FleetError;
    expect(e.code).toBe('DEVICE_OUT_OF_MEMORY');
    expect(e.retriable).toBe(true);
    expect(e.details['aclCode']).toMatch(/MEMORY|ALLOC|OOM/);
    expect((await device.memInfo()).freeBytes).toBe(freeBytes);

    const small = await device.loadModel(affineModel(256), { gears: [8] });
    const r = await small.execute([{ data: f32Bytes(ramp(8 * 256)), dims: [8, 256] }], 8);
    expect(r.outputs[0]?.dims).toEqual([8, 256]);
    await small.unload();
    expect((await device.memInfo()).freeBytes).toBe(freeBytes);
  });
});
