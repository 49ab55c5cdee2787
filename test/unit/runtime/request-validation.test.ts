import { describe, expect, it } from 'vitest';
import { parseModelConfig } from '../../../src/contracts/config-loader.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import type { Tensor } from '../../../src/contracts/tensor.ts';
import { validateForModel } from '../../../src/runtime/request-validation.ts';

const mlp = parseModelConfig({
  name: 'mlp',
  inputs: [{ name: 'input', dtype: 'float32', dims: [-1, 4] }],
  outputs: [{ name: 'probs', dtype: 'float32', dims: [-1, 2] }],
  maxBatchSize: 8,
});
const text = parseModelConfig({
  name: 'text',
  inputs: [{ name: 'tokens', dtype: 'int64', dims: [-1, -1] }],
  outputs: [{ name: 'probs', dtype: 'float32', dims: [-1, 4] }],
  buckets: { input: 'tokens', axis: 1, bounds: [8, 16] },
});

const f32 = (shape: number[], name = 'input'): Tensor => ({ name, dtype: 'float32', shape, data: new Uint8Array(shape.reduce((a, b) => a * b, 1) * 4) });
const req = (inputs: Tensor[], extra: Partial<RequestEnvelope> = {}): RequestEnvelope => ({ id: 'r', model: 'mlp', createdAt: 1, inputs, ...extra });

describe('validateForModel', () => {
  it('accepts a fitting request and reports items, default priority', () => {
    expect(validateForModel(req([f32([3, 4])]), mlp)).toEqual({ items: 3, length: undefined, priority: 1 });
  });

  it('reports the bucketed length', () => {
    const tokens: Tensor = { name: 'tokens', dtype: 'int64', shape: [2, 11], data: new Uint8Array(2 * 11 * 8) };
    expect(validateForModel(req([tokens], { model: 'text' }), text)).toMatchObject({ items: 2, length: 11 });
  });

  it.each([
    [req([f32([1, 5])]), 'inputs[0].shape[1]', /needs 4/],
    [req([f32([1, 4], 'x')]), 'inputs[0].name', /not an input/],
    [req([{ ...f32([1, 4]), dtype: 'int32' }]), 'inputs[0].dtype', /is float32/],
    [req([f32([1, 4, 1])]), 'inputs[0].shape', /rank 2/],
    [req([f32([9, 4])]), 'inputs[0].shape[0]', /exceed maxBatchSize/],
    [req([f32([1, 4])], { priority: 3 }), 'priority', /has 3 levels/],
    [req([f32([1, 4]), f32([1, 4])]), 'inputs', /takes 1 input/],
    [req([f32([0, 4])]), 'inputs[0].shape[0]', /at least 1/],
  ])('rejects a misfit naming the field %#', (r, field, message) => {
    try {
      validateForModel(r, mlp);
      expect.unreachable();
    } catch (err) {
      expect((err as { details: { field: string } }).details.field).toBe(field);
      expect((err as Error).message).toMatch(message);
    }
  });

  // Batch gathering looks each config input up by name: a request naming one input twice and
  // another not at all passed validation, then failed its whole batch (batch-mates included).
  it('rejects an input named twice, naming the duplicate and the missing input', () => {
    const pair = parseModelConfig({
      name: 'pair',
      inputs: [
        { name: 'a', dtype: 'float32', dims: [-1, 4] },
        { name: 'b', dtype: 'float32', dims: [-1, 4] },
      ],
      outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 1] }],
    });
    try {
      validateForModel(req([f32([1, 4], 'a'), f32([1, 4], 'a')], { model: 'pair' }), pair);
      expect.unreachable();
    } catch (err) {
      expect((err as { details: { field: string } }).details.field).toBe('inputs[1].name');
      expect((err as Error).message).toMatch(/"a".*twice.*"b"/);
    }
  });

  // The scheduler never splits a request and its largest batch is the largest gear: above it the
  // request was refused later as `rejected` with no DLQ record, though it can never be served.
  it('rejects more samples than the largest batch gear as invalid', () => {
    const geared = parseModelConfig({ ...mlp, batchGears: [1, 2, 4], maxBatchSize: 8 });
    expect(() => validateForModel(req([f32([6, 4])]), geared)).toThrow(/6 samples exceed the largest batch gear 4/);
    expect(validateForModel(req([f32([4, 4])]), geared)).toMatchObject({ items: 4 });
  });

  it('rejects a bucketed length beyond the largest bucket', () => {
    const tokens: Tensor = { name: 'tokens', dtype: 'int64', shape: [1, 17], data: new Uint8Array(17 * 8) };
    expect(() => validateForModel(req([tokens], { model: 'text' }), text)).toThrow(/outside 1..16/);
  });
});
