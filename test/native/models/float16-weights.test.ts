/**
 * A float16 initializer (a half-precision export) is a well-formed model the simulator cannot run:
 * the load must say so as an unsupported data type with the re-export to do, not call the file
 * malformed (ACL_ERROR_DESERIALIZE_MODEL), which sent operators looking for a damaged copy.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';

import { encodeModel, type TensorData } from '../../../scripts/onnx/onnx-model.ts';
import { openDevice, type Device } from '../../../src/device/index.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

/** y = x + w, x [N, 4]; w as given. */
function addModel(w: TensorData): string {
  const path = join(tempDir('npu-fleet-fp16-'), 'model.onnx');
  const bytes = encodeModel({
    graph: {
      name: 'add',
      nodes: [{ opType: 'Add', inputs: ['x', 'w'], outputs: ['y'] }],
      inputs: [{ name: 'x', dtype: 'float32', dims: ['N', 4] }],
      outputs: [{ name: 'y', dtype: 'float32', dims: ['N', 4] }],
      initializers: [w],
    },
    irVersion: 8,
    opsetImports: [{ domain: '', version: 17 }],
  });
  writeFileSync(path, bytes);
  return path;
}

let device: Device;
beforeAll(async () => {
  device = await openDevice(0);
});
afterAll(async () => {
  await device.close();
});

describe('a model with float16 weights', () => {
  it.each(['raw', 'typed'] as const)('is refused as an unsupported data type naming the tensor and the fix (%s encoding), not as malformed', async (encoding) => {
    // 1.0 in IEEE half precision is 0x3c00.
    const path = addModel({ name: 'w', dtype: 'float16', dims: [1, 4], values: new Uint16Array([0x3c00, 0x3c00, 0x3c00, 0x3c00]), encoding });
    const err = await device.loadModel(path, { gears: [1, 2] }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(FleetError);
    const fleetError = err as FleetError;
    expect(fleetError.code).toBe('MODEL_LOAD_FAILED');
    expect(fleetError.details['aclError']).toBe(100026);
    expect(fleetError.message).toMatch(/tensor 'w' has data type float16, which the simulator does not support \(float32, int64, int32, uint8, int8 and bool\); export the model with float32 weights/);
    expect(fleetError.message).not.toMatch(/malformed/);
  });

  it('the same model with float32 weights loads and runs (the refusal is the dtype, not the graph)', async () => {
    const model = await device.loadModel(addModel({ name: 'w', dtype: 'float32', dims: [1, 4], values: new Float32Array([1, 1, 1, 1]) }), { gears: [1, 2] });
    try {
      const x = new Float32Array([1, 2, 3, 4]);
      const { outputs } = await model.execute([{ data: new Uint8Array(x.buffer), dims: [1, 4] }], 1);
      const y = outputs[0];
      expect(y?.dims).toEqual([1, 4]);
      expect(y === undefined ? [] : Array.from(new Float32Array(y.data.buffer.slice(y.data.byteOffset, y.data.byteOffset + 16)))).toEqual([2, 3, 4, 5]);
    } finally {
      await model.unload();
    }
  });
});
