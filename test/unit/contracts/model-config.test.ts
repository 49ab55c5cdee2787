import { describe, expect, it } from 'vitest';
import { parseModelConfig } from '../../../src/contracts/config-loader.ts';

const bucketed = (dims: number[], axis: number): unknown => ({
  name: 'text',
  inputs: [{ name: 'tokens', dtype: 'int64', dims }],
  outputs: [{ name: 'probs', dtype: 'float32', dims: [-1, 4] }],
  buckets: { input: 'tokens', axis, bounds: [8, 16] },
});

describe('model config buckets', () => {
  it('accepts a bucket on a dynamic axis', () => {
    expect(parseModelConfig(bucketed([-1, -1], 1)).buckets?.axis).toBe(1);
  });

  // Past the input's rank, every request was refused with "configure buckets for it"; on a fixed
  // axis, requests of any length up to the largest bound were accepted and padded to a bound the
  // model cannot take, failing each batch on the device.
  it.each([
    ['past the rank', [-1, -1], 2, /buckets\.axis: .*rank 2/],
    ['on a fixed dimension', [-1, 8], 1, /buckets\.axis: .*fixed at 8/],
  ])('refuses a bucket axis %s, naming buckets.axis', (_what, dims, axis, message) => {
    expect(() => parseModelConfig(bucketed(dims, axis))).toThrow(message);
  });

  it("accepts a bucketed model's per-position output (one dynamic axis past the batch: the length) and refuses a second dynamic axis, naming the output", () => {
    const withOutput = (dims: number[]) => ({ ...(bucketed([-1, -1], 1) as object), outputs: [{ name: 'y', dtype: 'float32', dims }] });
    expect(parseModelConfig(withOutput([-1, -1, 5])).outputs[0]?.dims).toEqual([-1, -1, 5]);
    expect(() => parseModelConfig(withOutput([-1, -1, -1]))).toThrow(/outputs\[0\]\.dims: output y \[-1, -1, -1\] has dynamic axes 1 and 2; a bucketed model's output may vary along one axis past the batch/);
  });
});

describe('model config streams', () => {
  const plain = { name: 'cam', inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }], outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 2] }] };

  it("serves every frame by default (streams.superseded 'serve') and takes 'drop'", () => {
    expect(parseModelConfig(plain).streams).toEqual({ superseded: 'serve' });
    expect(parseModelConfig({ ...plain, streams: {} }).streams.superseded).toBe('serve');
    expect(parseModelConfig({ ...plain, streams: { superseded: 'drop' } }).streams.superseded).toBe('drop');
  });

  it('refuses another policy or a misspelt key, naming the path', () => {
    expect(() => parseModelConfig({ ...plain, streams: { superseded: 'latest' } })).toThrow(/streams\.superseded/);
    expect(() => parseModelConfig({ ...plain, streams: { supersede: 'drop' } })).toThrow(/supersede/);
  });
});

describe('model config dynamic input dimensions', () => {
  // Requests are checked against the config and a batch is one tensor per input: past the batch
  // axis only a bucketed axis may vary. Such a config passed models validate, and the worker then
  // refused every request ("dynamic dimension ... is only served through buckets").
  it('refuses a dynamic axis past the batch on an input that is not bucketed there, naming the input, the axis and the fix', () => {
    const image = { name: 'det', inputs: [{ name: 'image', dtype: 'float32', dims: [-1, 3, -1, -1] }], outputs: [{ name: 'boxes', dtype: 'float32', dims: [-1, 4] }] };
    expect(() => parseModelConfig(image)).toThrow(
      /inputs\[0\]\.dims: axis 2 of input image is dynamic \(-1\), but only a bucketed axis may vary past the batch: set the size the model takes, or bucket it \(buckets: \{ input: image, axis: 2, bounds: \[\.\.\.\] \}\)/,
    );
    const twoInputs = { ...(bucketed([-1, -1], 1) as object), inputs: [{ name: 'tokens', dtype: 'int64', dims: [-1, -1] }, { name: 'mask', dtype: 'int64', dims: [-1, -1] }] };
    expect(() => parseModelConfig(twoInputs)).toThrow(/inputs\[1\]\.dims: axis 1 of input mask is dynamic/);
  });

  it('accepts the batch axis and the bucketed axis dynamic', () => {
    expect(parseModelConfig(bucketed([-1, -1, 4], 1)).inputs[0]?.dims).toEqual([-1, -1, 4]);
    expect(parseModelConfig({ name: 'm', inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }], outputs: [{ name: 'y', dtype: 'float32', dims: [-1, -1] }] }).outputs[0]?.dims).toEqual([-1, -1]);
  });
});

describe('model config output batch axis', () => {
  // The worker splits an output per request along its first -1 (size / gear values per item).
  // Without a -1 it split along dim 0 one row per item whatever the model put there.
  const withOutput = (dims: number[], extra: object = {}) => ({ name: 'm', inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }], outputs: [{ name: 'y', dtype: 'float32', dims }], ...extra });

  it.each([
    ['one row per item', [-1, 10]],
    ['flattened', [-1]],
    ['transposed', [3, -1]],
  ])('accepts an output whose batch is %s', (_what, dims) => {
    expect(parseModelConfig(withOutput(dims)).outputs[0]?.dims).toEqual(dims);
  });

  it.each([
    ['an output without a -1', withOutput([3, 2]), /outputs\[0\]\.dims: output y \[3, 2\] has no -1: mark with -1 the axis that grows with the batch/],
    [
      "a bucketed model's output with its batch past axis 0",
      withOutput([3, -1], { inputs: [{ name: 'x', dtype: 'float32', dims: [-1, -1] }], buckets: { input: 'x', axis: 1, bounds: [8] } }),
      /outputs\[0\]\.dims: output y \[3, -1\] has its batch \(the first -1\) on axis 1; a bucketed model's outputs take the batch on axis 0/,
    ],
  ])('refuses %s, naming the output and the fix', (_what, config, message) => {
    expect(() => parseModelConfig(config)).toThrow(message);
  });
});

describe('model config tensor names', () => {
  // Requests name their tensors and the worker binds them by config position: with two inputs of
  // one name, every request was refused ('input "x" is given twice') or, for outputs, results held
  // two tensors of one name. models validate passed it; only a load against the model caught it.
  it.each([
    ['inputs', { inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }, { name: 'x', dtype: 'float32', dims: [-1, 2] }], outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 2] }] }, /inputs\[1\]\.name: "x" is also the name of inputs\[0\]; each input needs its own name/],
    ['outputs', { inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }], outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 2] }, { name: 'y', dtype: 'float32', dims: [-1, 2] }] }, /outputs\[1\]\.name: "y" is also the name of outputs\[0\]; each output needs its own name/],
  ])('refuses two %s of one name, naming the second', (_what, tensors, message) => {
    expect(() => parseModelConfig({ name: 'm', ...tensors })).toThrow(message);
  });
});

describe('model config increasing lists', () => {
  const plain = { name: 'm', inputs: [{ name: 'x', dtype: 'float32', dims: [-1, -1] }], outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 2] }] };
  // Was 'batchGears: batchGears must be strictly increasing (fix the value)': the field twice, the
  // list not shown, and no word of what would do.
  it.each([
    ['batchGears', { batchGears: [4, 2, 8] }, '[4, 2, 8]', '[2, 4, 8]'],
    ['batchGears', { batchGears: [1, 2, 2, 4] }, '[1, 2, 2, 4]', '[1, 2, 4]'],
    ['buckets.bounds', { buckets: { input: 'x', axis: 1, bounds: [32, 16, 16] } }, '[32, 16, 16]', '[16, 32]'],
  ])('an unsorted or repeated %s shows the list and the sorted one to write', (field, over, got, meant) => {
    const esc = (s: string): string => s.replace(/[.[\]]/g, '\\$&');
    expect(() => parseModelConfig({ ...plain, ...over })).toThrow(new RegExp(`${esc(field)}: must be strictly increasing \\(each once, smallest first\\), got ${esc(got)} \\(write ${esc(meant)}\\)(;|$)`));
  });
});
