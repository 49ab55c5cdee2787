/**
 * The committed example models load in onnxruntime and compute what their configs promise:
 * declared input/output names, shapes at every batch gear, probabilities that sum to 1.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { DEFAULT_MODELS_DIR } from '../../../scripts/gen-models.ts';
import { Prng } from '../../../scripts/onnx/prng.ts';
import { ModelConfigSchema } from '../../../src/contracts/model-config.ts';
import { randomInput, runOrt } from '../ops/differential.ts';
import { exampleInputs } from './example-inputs.ts';

const NAMES = ['mlp-classifier', 'small-cnn', 'text-classifier'];

describe.each(NAMES)('%s on onnxruntime', (name) => {
  const config = ModelConfigSchema.parse(parse(readFileSync(join(DEFAULT_MODELS_DIR, name, 'config.yaml'), 'utf8')));
  const modelPath = join(DEFAULT_MODELS_DIR, name, '1', 'model.onnx');

  it('loads with the input and output names of config.yaml', async () => {
    const session = await ort.InferenceSession.create(modelPath);
    expect(session.inputNames).toEqual(config.inputs.map((i) => i.name));
    expect(session.outputNames).toEqual(config.outputs.map((o) => o.name));
    await session.release();
  });

  it('runs at every gear with the declared output shapes', async () => {
    for (const gear of config.batchGears ?? []) {
      const inputs = exampleInputs(config, gear, new Prng(gear));
      const outputs = await runOrt(modelPath, inputs);
      for (const o of config.outputs) {
        const out = outputs.get(o.name);
        expect(out?.dims).toEqual(o.dims.map((d) => (d === -1 ? gear : d)));
        expect(Array.from(out?.data ?? []).every(Number.isFinite)).toBe(true);
        if (o.name === 'probs') {
          const classes = o.dims[1] ?? 0;
          for (let b = 0; b < gear; b++) {
            const row = Array.from(out?.data.subarray(b * classes, (b + 1) * classes) ?? []);
            expect(row.reduce((s, v) => s + v, 0)).toBeCloseTo(1, 5);
          }
        }
      }
    }
  });

  it('gives different outputs for different inputs (weights are not degenerate)', async () => {
    const a = await runOrt(modelPath, exampleInputs(config, 2, new Prng(7)));
    const out = Array.from(a.values().next().value?.data ?? []);
    const half = out.length / 2;
    expect(out.slice(0, half)).not.toEqual(out.slice(half));
  });
});

it('text-classifier accepts every bucket length (both dims dynamic)', async () => {
  const path = join(DEFAULT_MODELS_DIR, 'text-classifier', '1', 'model.onnx');
  for (const seq of [1, 16, 128, 300]) {
    const tokens = randomInput(new Prng(seq), { name: 'tokens', dtype: 'int64', dims: [] }, [3, seq], [0, 1000]);
    const out = await runOrt(path, [tokens]);
    expect(out.get('probs')?.dims).toEqual([3, 4]);
  }
});
