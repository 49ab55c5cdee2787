/**
 * execute() pins each input view with a napi_ref until the promise settles. When the call throws
 * part-way (a later input is malformed), the refs taken so far must be released.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';

import { encodeModel } from '../../../scripts/onnx/onnx-model.ts';
import { loadAddon, type RawDevice } from '../../../src/device/native-addon.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { f32Bytes, ramp } from '../../native/support/tiny-models.ts';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** y = x + z over [batch, 4] float32: two inputs. */
function addModel(): string {
  const path = join(tempDir('npu-fleet-review-'), 'add2.onnx');
  writeFileSync(
    path,
    encodeModel({
      graph: {
        name: 'add2',
        nodes: [{ opType: 'Add', inputs: ['x', 'z'], outputs: ['y'] }],
        inputs: [
          { name: 'x', dtype: 'float32', dims: ['batch', 4] },
          { name: 'z', dtype: 'float32', dims: ['batch', 4] },
        ],
        outputs: [{ name: 'y', dtype: 'float32', dims: ['batch', 4] }],
      },
      irVersion: 8,
      opsetImports: [{ domain: '', version: 17 }],
    }),
  );
  return path;
}

describe('binding: inputs pinned by a rejected execute', () => {
  let raw: RawDevice;
  beforeAll(async () => {
    raw = await loadAddon().openDevice(1);
  });
  afterAll(async () => {
    await raw.close();
  });

  it('does not pin earlier inputs forever when a later input is rejected', async () => {
    const model = await raw.loadModel(addModel(), [1], {}, 1, {});
    try {
      const weak = ((): WeakRef<Uint8Array> => {
        const first = f32Bytes(ramp(4));
        const bad = () => model.execute([{ data: first, dims: [1, 4] }, { data: 'not bytes' as unknown as Uint8Array, dims: [1, 4] }], 1, 0);
        expect(bad).toThrow(TypeError);
        return new WeakRef(first);
      })();
      for (let i = 0; i < 5 && weak.deref() !== undefined; i++) {
        await new Promise((r) => setImmediate(r));
        gc();
      }
      expect(weak.deref(), 'the rejected call still holds a strong napi_ref on input 0').toBeUndefined();
    } finally {
      await model.unload();
    }
  });
});
