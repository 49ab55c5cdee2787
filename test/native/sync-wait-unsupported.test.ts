/**
 * A chip whose ACL exports aclrtSynchronizeEventWithTimeout but does not support it (the call
 * returns ACL_ERROR_RT_FEATURE_NOT_SUPPORT, 207000). The device thread must then poll the batch's
 * events instead, as when the symbol is absent, and fail nothing: not the batch whose wait got the
 * error, nor any later one. The simulator's `nosyncwait` fault plays that chip on device 0; device 1
 * is left clean as the reference run. Faults are read when the simulator initialises, hence this
 * file's own process.
 */
import { describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';
// Device 0: no timed event wait; its 3rd execution also hangs 300 ms (a batch still in flight
// while the thread polls).
process.env['NPU_FLEET_SIM_FAULTS'] = 'dev0:nosyncwait,dev0:hang@3:300ms';

import { openDevice } from '../../src/device/index.ts';
import { affine, affineModel, asF32, f32Bytes, ramp, rowMeanModel } from './support/tiny-models.ts';

describe('aclrtSynchronizeEventWithTimeout not supported by the device', () => {
  it('falls back to polling the events: every batch completes with the outputs of a device that has the wait', async () => {
    const [unsupported, reference] = await Promise.all([openDevice(0), openDevice(1)]);
    try {
      const path = affineModel(8);
      const [m0, m1] = await Promise.all([
        unsupported.loadModel(path, { gears: [1, 2, 4] }),
        reference.loadModel(path, { gears: [1, 2, 4] }),
      ]);

      // The first batch is the one whose timed wait reports "not supported": it must not fail.
      const x1 = ramp(8, 1);
      const first = await m0.execute([{ data: f32Bytes(x1), dims: [1, 8] }], 1);
      expect(Array.from(asF32(first.outputs[0]!.data))).toEqual(Array.from(affine(x1)));

      // One at a time, then many in flight on both slots (the 3rd execution hangs 300 ms).
      const x2 = ramp(16, 2);
      const second = await m0.execute([{ data: f32Bytes(x2), dims: [2, 8] }], 2);
      expect(Array.from(asF32(second.outputs[0]!.data))).toEqual(Array.from(affine(x2)));
      const inputs = Array.from({ length: 24 }, (_, i) => {
        const gear = [1, 2, 4][i % 3]!;
        return { gear, x: ramp(gear * 8, i * 5) };
      });
      const run = (m: typeof m0) =>
        Promise.all(inputs.map(({ gear, x }) => m.execute([{ data: f32Bytes(x), dims: [gear, 8] }], gear)));
      const t0 = performance.now();
      const [got, want] = await Promise.all([run(m0), run(m1)]);
      expect(performance.now() - t0).toBeGreaterThanOrEqual(250); // the hang was waited out
      got.forEach((r, i) => {
        const expected = Array.from(asF32(want[i]!.outputs[0]!.data));
        expect(expected).toEqual(Array.from(affine(inputs[i]!.x)));
        expect(r.outputs[0]?.dims).toEqual(want[i]!.outputs[0]?.dims);
        expect(Array.from(asF32(r.outputs[0]!.data))).toEqual(expected);
      });

      // A range-dynamic model on the same device (output dims read back after the run).
      const range = await unsupported.loadModel(rowMeanModel(), { gears: [1, 2, 4], maxInputDims: { x: [4, 64] } });
      const x = ramp(2 * 10, 3);
      const r = await range.execute([{ data: f32Bytes(x), dims: [2, 10] }], 2);
      expect(r.outputs[0]?.dims).toEqual([2]);
      asF32(r.outputs[0]!.data).forEach((v, b) => {
        const row = x.subarray(b * 10, (b + 1) * 10);
        expect(v).toBeCloseTo(row.reduce((a, w) => a + w, 0) / 10, 4);
      });
      await range.unload();
      await Promise.all([m0.unload(), m1.unload()]);
    } finally {
      await Promise.all([unsupported.close(), reference.close()]);
    }
  });
});
