import { describe, expect, it } from 'vitest';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { inputDigest } from '../../../src/producer/input-digest.ts';

const base: RequestEnvelope = {
  id: 'r1',
  model: 'm',
  priority: 0,
  createdAt: 1,
  inputs: [
    { name: 'a', dtype: 'float32', shape: [1, 2], data: new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]) },
    { name: 'b', dtype: 'uint8', shape: [1, 2], data: new Uint8Array([9, 10]) },
  ],
};
const withInput = (i: number, change: Partial<RequestEnvelope['inputs'][number]>): RequestEnvelope => ({
  ...base,
  inputs: base.inputs.map((t, j) => (j === i ? { ...t, ...change } : t)),
});

describe('inputDigest', () => {
  it('is the same for what does not decide the answer: id, priority, deadline, replyTo, meta, createdAt', () => {
    const same = { ...base, id: 'other', priority: 2, deadlineAt: 99, replyTo: 'q', meta: { k: 'v' }, createdAt: 2 };
    expect(inputDigest(same)).toBe(inputDigest(base));
    // The bytes, not the view: a Buffer over the same bytes at an offset digests alike.
    const shifted = Buffer.concat([Buffer.from([0xff]), Buffer.from(base.inputs[0]!.data)]).subarray(1);
    expect(inputDigest(withInput(0, { data: shifted }))).toBe(inputDigest(base));
  });

  it.each([
    ['the model', { ...base, model: 'n' }],
    ['a pinned version', { ...base, version: '2' }],
    ['one input byte', withInput(1, { data: new Uint8Array([9, 11]) })],
    ['an input name', withInput(0, { name: 'c' })],
    ['a dtype over the same bytes', withInput(0, { dtype: 'int32' })],
    ['a shape over the same bytes', withInput(0, { shape: [2, 1] })],
    ['the input order', { ...base, inputs: [base.inputs[1]!, base.inputs[0]!] }],
    // Bytes moved from one tensor to the next: the same byte stream, told apart by the lengths.
    ['a byte moved between tensors', { ...base, inputs: [{ ...base.inputs[0]!, data: base.inputs[0]!.data.subarray(0, 7) }, { ...base.inputs[1]!, data: new Uint8Array([8, 9, 10]) }] }],
  ] as Array<[string, RequestEnvelope]>)('differs with %s', (_what, changed) => {
    expect(inputDigest(changed)).not.toBe(inputDigest(base));
  });
});
