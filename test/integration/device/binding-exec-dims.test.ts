/**
 * For range-dynamic models the execute dims reach ACL as the real input shape
 * (aclmdlSetDatasetTensorDesc). Real ACL trusts them; the simulator checks them against the
 * buffer. The binding must not depend on that check.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';

import { loadAddon, type RawDevice } from '../../../src/device/native-addon.ts';
import { f32Bytes, ramp, rowMeanModel } from '../../native/support/tiny-models.ts';

/** Outcome of a raw call, whether it throws synchronously (argument checks) or rejects. */
async function settle(call: () => Promise<unknown>): Promise<{ ok: true; value: unknown } | { ok: false; error: unknown }> {
  return Promise.resolve().then(call).then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );
}

describe('binding: execute dims against the bytes given', () => {
  let raw: RawDevice;
  beforeAll(async () => {
    raw = await loadAddon().openDevice(1);
  });
  afterAll(async () => {
    await raw.close();
  });

  it('checks that input dims describe exactly the bytes given before handing them to ACL', async () => {
    // Range-dynamic model: the dims go to ACL as the real input shape (aclmdlSetDatasetTensorDesc).
    // Real ACL trusts them and reads dims × 4 bytes from the device buffer; only the simulator
    // checks the buffer size. So the binding must refuse dims that disagree with the data.
    const model = await raw.loadModel(rowMeanModel(), [1, 2, 4], { x: [4, 8] }, 2, {});
    try {
      const four = f32Bytes(ramp(4));
      // Claims 8 elements, gives 4: ACL would average 4 stale floats in.
      const short = await settle(() => model.execute([{ data: four, dims: [1, 8] }], 1, 0));
      expect(short.ok).toBe(false);
      if (!short.ok) expect(short.error).toBeInstanceOf(RangeError);
      // Claims more than the device buffer holds: an out-of-bounds device read on real ACL.
      const past = await settle(() => model.execute([{ data: four, dims: [1, 64] }], 1, 0));
      expect(past.ok).toBe(false);
      if (!past.ok) expect(past.error).toBeInstanceOf(RangeError);
      // Wrong rank.
      const rank = await settle(() => model.execute([{ data: four, dims: [4] }], 1, 0));
      expect(rank.ok).toBe(false);
      if (!rank.ok) expect(rank.error).toBeInstanceOf(RangeError);
      // The matching call works.
      const good = (await model.execute([{ data: four, dims: [1, 4] }], 1, 0)) as { outputs: Array<{ dims: number[] }> };
      expect(good.outputs[0]?.dims).toEqual([1]);
    } finally {
      await model.unload();
    }
  });
});
