/**
 * A model exported with a dynamic dimension past the batch (a sequence length) that config.yaml
 * serves at one fixed size: model-io-check accepts it ("a dynamic one accepts what the config
 * fixes"), so the worker must load it bounded by the config's dims. It used to fail every load
 * with "pass maxInputDims.x", a loadModel option config.yaml cannot set.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';

import { encodeModel } from '../../../scripts/onnx/onnx-model.ts';
import { parseModelConfig } from '../../../src/contracts/config-loader.ts';
import { openDevice, type Device } from '../../../src/device/index.ts';
import { loadChecked } from '../../../src/runtime/load-checked.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { asF32, f32Bytes, ramp } from '../support/tiny-models.ts';

/** sum = ReduceSum(x [N, L], axis 1); relu = Relu(x) [N, L]: both L dynamic in the file. */
function seqModel(): string {
  const path = join(tempDir('npu-fleet-fixed-dyn-'), 'model.onnx');
  const bytes = encodeModel({
    graph: {
      name: 'seq',
      nodes: [
        { opType: 'ReduceSum', inputs: ['x', 'axes'], outputs: ['sum'], attributes: { keepdims: { type: 'int', value: 0 } } },
        { opType: 'Relu', inputs: ['x'], outputs: ['relu'] },
      ],
      inputs: [{ name: 'x', dtype: 'float32', dims: ['N', 'L'] }],
      outputs: [
        { name: 'sum', dtype: 'float32', dims: ['N'] },
        { name: 'relu', dtype: 'float32', dims: ['N', 'L'] },
      ],
      initializers: [{ name: 'axes', dtype: 'int64', dims: [1], values: new BigInt64Array([1n]) }],
    },
    irVersion: 8,
    opsetImports: [{ domain: '', version: 17 }],
  });
  writeFileSync(path, bytes);
  return path;
}

const config = parseModelConfig({
  name: 'seq',
  inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 8] }],
  outputs: [
    { name: 'sum', dtype: 'float32', dims: [-1] },
    { name: 'relu', dtype: 'float32', dims: [-1, 8] },
  ],
  maxBatchSize: 4,
  batchGears: [1, 2, 4],
});

describe('loadChecked: a model dimension config.yaml fixes', () => {
  let device: Device;
  beforeAll(async () => {
    device = await openDevice(0);
  });
  afterAll(async () => {
    await device.close();
  });

  it('loads the model bounded by config.yaml and serves batches at the fixed size', async () => {
    const model = await loadChecked(device, seqModel(), config, 'seq version 1');
    try {
      for (const gear of [1, 4]) {
        const x = ramp(gear * 8, -5);
        const r = await model.execute([{ data: f32Bytes(x), dims: [gear, 8] }], gear);
        const sums = Array.from({ length: gear }, (_, i) => x.subarray(i * 8, i * 8 + 8).reduce((a, b) => a + b, 0));
        expect(r.outputs[0]?.dims).toEqual([gear]);
        expect(Array.from(asF32(r.outputs[0]!.data))).toEqual(sums.map((s) => Math.fround(s)));
        expect(r.outputs[1]?.dims).toEqual([gear, 8]);
        expect(Array.from(asF32(r.outputs[1]!.data))).toEqual(Array.from(x, (v) => Math.max(v, 0)));
      }
    } finally {
      await model.unload();
    }
    const mem = await device.memInfo();
    expect(mem.freeBytes).toBe(mem.totalBytes);
  });
});
