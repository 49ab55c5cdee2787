/**
 * The comparator of the differential tests: tight enough to catch a kernel that is wrong by one
 * term, loose only where float32 summation order legitimately matters.
 */
import { describe, expect, it } from 'vitest';
import { encodeModel } from '../../../scripts/onnx/onnx-model.ts';
import { Prng } from '../../../scripts/onnx/prng.ts';
import { compare, concreteDims, randomInput, runOrt } from './differential.ts';
import { OP_CASES } from './op-cases.ts';

describe('compare', () => {
  it('passes relative errors up to 1e-4 and fails beyond', () => {
    expect(compare([1.00009, -50.004], [1, -50]).failures).toBe(0);
    expect(compare([1.00011], [1]).failures).toBe(1);
    expect(compare([-50.006], [-50]).failures).toBe(1);
  });

  it('fails NaN, infinities and length mismatches', () => {
    expect(compare([NaN], [1]).failures).toBe(1);
    expect(compare([Infinity], [1]).failures).toBe(1);
    expect(compare([1], [NaN]).failures).toBe(1);
    expect(() => compare([1, 2], [1])).toThrow(/length/);
  });

  it('floors tiny magnitudes at max(1e-3, 1% of the tensor RMS)', () => {
    // RMS ~ 0.58 -> floor 5.8e-3 -> tolerance 5.8e-7 for the near-zero element.
    const expected = [1, 0, 0, 0.0001];
    expect(compare([1, 0, 0, 0.0001005], expected).failures).toBe(0);
    expect(compare([1, 0, 0, 0.0001007], expected).failures).toBe(1);
    expect(compare([1e-7], [0]).floor).toBe(1e-3);
    expect(compare([1e-7], [0]).failures).toBe(0);
    expect(compare([2e-7], [0]).failures).toBe(1);
  });

  it('catches a convolution that is wrong by a single weight changed by 1%', async () => {
    const c = OP_CASES.find((k) => k.name === 'Conv/large-blocked');
    if (!c) throw new Error('case missing');
    const inputs = c.graph.inputs.map((i) => randomInput(new Prng(1), i, concreteDims(i.dims, 2)));
    const good = await runOrt(encodeModel({ graph: c.graph }), inputs);
    const weights = c.graph.initializers?.map((t) => {
      if (t.name !== 'W') return t;
      const v = Float32Array.from(t.values as Float32Array);
      v[100] = (v[100] ?? 0) * 1.01;
      return { ...t, values: v };
    });
    const bad = await runOrt(encodeModel({ graph: { ...c.graph, initializers: weights } }), inputs);
    const cmp = compare(bad.get('y')?.data ?? [], good.get('y')?.data ?? []);
    expect(cmp.failures).toBeGreaterThan(10);
  });
});
