/**
 * Buffer sizes are products of dims that come from JS (maxInputDims / maxOutputDims, gears): a
 * product that does not fit size_t must be refused, not wrapped around to a small allocation.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';

import { FleetError } from '../../../src/errors/fleet-error.ts';
import { openDevice, type Device } from '../../../src/device/index.ts';
import { loadAddon, type RawDevice } from '../../../src/device/native-addon.ts';
import { affineModel, affineRangeModel } from '../../native/support/tiny-models.ts';

async function settle(p: Promise<unknown>): Promise<{ ok: true; value: unknown } | { ok: false; error: unknown }> {
  return p.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );
}

describe('binding: buffer sizes from untrusted max dims', () => {
  let device: Device;
  let raw: RawDevice;
  beforeAll(async () => {
    device = await openDevice(0);
    raw = await loadAddon().openDevice(1);
  });
  afterAll(async () => {
    if (!device.closed) await device.close();
    await raw.close();
  });

  it('refuses max dims whose byte size overflows size_t instead of allocating a wrapped-around buffer', async () => {
    // 2^32 × 2^32 elements = 2^64: wraps to 0 in size_t arithmetic.
    const huge = 2 ** 32;
    const viaTs = await settle(device.loadModel(affineRangeModel(), { gears: [1, 2], maxInputDims: { x: [huge, huge] }, maxOutputDims: { y: [huge, huge] } }));
    expect(viaTs.ok).toBe(false);
    if (!viaTs.ok) {
      expect(viaTs.error).toBeInstanceOf(FleetError);
      expect(['INVALID_ARGUMENT', 'MODEL_LOAD_FAILED']).toContain((viaTs.error as FleetError).code);
    }
    // The binding itself (TS checks bypassed) must not size buffers from a wrapped product either.
    const direct = await settle(raw.loadModel(affineRangeModel(), [1, 2], { x: [huge, huge] }, 2, { y: [huge, huge] }));
    expect(direct.ok).toBe(false);
    if (!direct.ok) expect(direct.error).toMatchObject({ kind: 'invalid', message: expect.stringMatching(/overflow/) });
    // And the device is still fine.
    const ok = await raw.loadModel(affineModel(4), [1], {}, 1, {});
    await ok.unload();
  });
});
