import { describe, expect, it } from 'vitest';
import type { Dtype } from '../../../src/contracts/tensor.ts';
import { modelConfigMismatches } from '../../../src/runtime/model-io-check.ts';

const t = (name: string, dtype: Dtype, dims: number[]) => ({ name, dtype, dims });
const config = {
  inputs: [t('image', 'float32', [-1, 3, 8, 8]), t('mask', 'uint8', [-1, 8])],
  outputs: [t('logits', 'float32', [-1, 10])],
};
const asIs = { inputs: config.inputs, outputs: config.outputs };

describe('modelConfigMismatches', () => {
  it.each([
    ['the model as configured', asIs, []],
    ['a dynamic model axis the config fixes', { ...asIs, inputs: [t('image', 'float32', [-1, 3, -1, -1]), config.inputs[1]!] }, []],
    ['a static batch axis (gears come from the model)', { ...asIs, outputs: [t('logits', 'float32', [32, 10])] }, []],
  ])('accepts %s', (_name, model, want) => {
    expect(modelConfigMismatches(config, model)).toEqual(want);
  });

  it.each([
    ['inputs in another order', { ...asIs, inputs: [config.inputs[1]!, config.inputs[0]!] }, /^inputs: config\.yaml lists \[image, mask\] but the model has \[mask, image\]/],
    ['a renamed output', { ...asIs, outputs: [t('probs', 'float32', [-1, 10])] }, /^outputs: config\.yaml lists \[logits\] but the model has \[probs\]/],
    ['a missing input', { ...asIs, inputs: [config.inputs[0]!] }, /^inputs: config\.yaml lists \[image, mask\] but the model has \[image\]/],
    ['another dtype', { ...asIs, inputs: [t('image', 'float16', [-1, 3, 8, 8]), config.inputs[1]!] }, /^inputs\[0\] image: config\.yaml says float32, the model takes float16$/],
    ['another fixed size', { ...asIs, outputs: [t('logits', 'float32', [-1, 4])] }, /^outputs\[0\] logits: config\.yaml dims \[-1, 10\] do not fit the model's \[-1, 4\]/],
    ['another rank', { ...asIs, inputs: [t('image', 'float32', [-1, 192]), config.inputs[1]!] }, /^inputs\[0\] image: config\.yaml dims \[-1, 3, 8, 8\] do not fit the model's \[-1, 192\]/],
    // The worker splits the output along the config's first -1: on the model's fixed 10 it would cut across requests.
    ['an output whose batch is on another axis', { ...asIs, outputs: [t('logits', 'float32', [10, -1])] }, /^outputs\[0\] logits: config\.yaml puts the batch \(its first -1\) on axis 0 of \[-1, 10\], where the model's \[10, -1\] is fixed: mark the model's batch axis, e\.g\. dims \[10, -1\]$/],
  ])('reports %s', (_name, model, message) => {
    const problems = modelConfigMismatches(config, model);
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(message);
  });

  it('a config axis left dynamic where the model is fixed is a mismatch (requests of other sizes would fail)', () => {
    const bucketed = { inputs: [t('tokens', 'int64', [-1, -1])], outputs: [t('probs', 'float32', [-1, 4])] };
    expect(modelConfigMismatches(bucketed, { inputs: [t('tokens', 'int64', [-1, 64])], outputs: bucketed.outputs })).toHaveLength(1);
    expect(modelConfigMismatches(bucketed, bucketed)).toEqual([]);
  });
});
