/**
 * Every example model through the binding on the simulator vs onnxruntime, at batch 1 and at the
 * largest gear (the text classifier also at its smallest and largest bucket length). Tolerance as
 * documented in test/native/ops/differential.ts.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { DEFAULT_MODELS_DIR } from '../../../scripts/gen-models.ts';
import { Prng } from '../../../scripts/onnx/prng.ts';
import { ModelConfigSchema, type ModelConfig } from '../../../src/contracts/model-config.ts';
import { compare, describeComparison, runOrt, type HostTensor } from '../ops/differential.ts';
import { openSimDevice, type SimDeviceHandle } from '../ops/sim-runner.ts';
import { exampleInputs, inputDims } from './example-inputs.ts';

let device: SimDeviceHandle;
const margins: string[] = [];
beforeAll(async () => {
  device = await openSimDevice(0);
});
afterAll(async () => {
  console.log(`example models, largest |err|/tolerance: ${margins.join(', ')}`);
  await device?.close();
});

function loadConfig(name: string): ModelConfig {
  return ModelConfigSchema.parse(parse(readFileSync(join(DEFAULT_MODELS_DIR, name, 'config.yaml'), 'utf8')));
}

/** Pads the tail of each row with token 0, as the scheduler does when it fills a bucket. */
function withPadding(tokens: HostTensor, rng: Prng): HostTensor {
  const [batch = 1, seq = 1] = tokens.dims;
  const data = tokens.data as BigInt64Array;
  for (let b = 0; b < batch; b++) {
    const used = rng.int(1, seq + 1);
    data.fill(0n, b * seq + used, (b + 1) * seq);
  }
  return tokens;
}

const CASES: { name: string; seqLens: (number | undefined)[] }[] = [
  { name: 'mlp-classifier', seqLens: [undefined] },
  { name: 'small-cnn', seqLens: [undefined] },
  { name: 'text-classifier', seqLens: [16, 128] },
];

describe.each(CASES)('$name: simulator vs onnxruntime', ({ name, seqLens }) => {
  const config = loadConfig(name);
  const path = join(DEFAULT_MODELS_DIR, name, '1', 'model.onnx');
  const gears = config.batchGears ?? [];
  const largest = Math.max(...gears);

  const runs = [1, largest].flatMap((batch) => seqLens.map((seq) => ({ batch, seq })));
  it.each(runs)('batch $batch, seq $seq', async ({ batch, seq }) => {
    const maxInputDims = Object.fromEntries(config.inputs.map((i) => [i.name, inputDims(config, i, largest)]));
    const model = await device.load(path, gears, maxInputDims);
    try {
      const rng = new Prng(batch * 1000 + (seq ?? 0));
      let inputs = exampleInputs(config, batch, rng, seq);
      if (config.buckets) inputs = inputs.map((t) => (t.name === config.buckets?.input ? withPadding(t, rng) : t));
      const expected = await runOrt(path, inputs);
      const got = await model.run(inputs, batch);
      config.outputs.forEach((o, k) => {
        const want = expected.get(o.name);
        expect(got[k]?.dims).toEqual(want?.dims);
        const cmp = compare(got[k]?.data ?? [], want?.data ?? []);
        margins.push(`${name}@${batch}${seq === undefined ? '' : `x${seq}`} ${(cmp.worst?.ratio ?? 0).toFixed(3)}`);
        expect(cmp.failures, `${name} ${o.name}: ${describeComparison(cmp)}`).toBe(0);
      });
    } finally {
      await model.unload();
    }
  });
});
