import { describe, expect, it } from 'vitest';
import { KEEP_ANSWERED_INPUT_BYTES, mayHoldLargeInput } from '../../../../src/transport/bullmq/answered-inputs.ts';

const job = (...dataChars: number[]): unknown => ({ id: 'r', model: 'm', inputs: dataChars.map((n, i) => ({ name: `x${i}`, dtype: 'uint8', shape: [n], data: 'A'.repeat(n) })) });

describe('mayHoldLargeInput (whether an answered job is worth the trimming script)', () => {
  it.each([
    ['a small request', job(344), false],
    ['small tensors adding up past half the bound', job(1500, 1500), true],
    ['one large tensor', job(KEEP_ANSWERED_INPUT_BYTES), true],
    ['a long string body (not JSON)', 'x'.repeat(KEEP_ANSWERED_INPUT_BYTES + 1), true],
    ['a short string body', 'garbage', false],
    ['an object of another shape (measured by the script)', { blob: 'x' }, true],
    ['inputs whose data is not a string', { inputs: [{ data: [1, 2, 3] }] }, true],
  ])('%s → %s', (_what, data, expected) => {
    expect(mayHoldLargeInput(data)).toBe(expected);
  });
});
