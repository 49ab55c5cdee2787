/**
 * gatherBatch against a naive element-by-element reference: any dtype, a bucketed axis at any
 * position of a rank-2..4 tensor, a dirty reused destination, several members of mixed sizes.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DTYPES, DTYPE_BYTES, encodeScalar, gatherBatch, scatterBatch, tensorBytes } from '../../../src/scheduler/index.ts';
import type { Tensor } from '../../../src/scheduler/index.ts';

/** Index-by-index: member element at (r, ...idx) lands at (offset + r, ...idx); the rest is padding. */
function reference(parts: Tensor[], gear: number, axis: number | undefined, bound: number | undefined, padValue: number): Uint8Array {
  const first = parts[0] as Tensor;
  const eb = DTYPE_BYTES[first.dtype];
  const outShape = [gear, ...first.shape.slice(1)];
  if (axis !== undefined) outShape[axis] = bound as number;
  const strides = (shape: number[]): number[] => shape.map((_, i) => shape.slice(i + 1).reduce((a, b) => a * b, 1));
  const total = outShape.reduce((a, b) => a * b, 1);
  const out = new Uint8Array(total * eb);
  const pad = encodeScalar(first.dtype, padValue);
  const os = strides(outShape);
  let rowBase = 0;
  for (const t of parts) {
    const shape = [...t.shape];
    // Every position of the member's rows, padded extent on the axis.
    const ext = [...shape];
    if (axis !== undefined) ext[axis] = bound as number;
    const n = ext.reduce((a, b) => a * b, 1);
    const ts = strides(shape);
    const es = strides(ext);
    for (let k = 0; k < n; k++) {
      const idx = ext.map((_, d) => Math.floor(k / (es[d] as number)) % (ext[d] as number));
      const dst = ((rowBase + (idx[0] as number)) * (os[0] as number) + idx.slice(1).reduce((a, v, j) => a + v * (os[j + 1] as number), 0)) * eb;
      const real = axis === undefined || (idx[axis] as number) < (shape[axis] as number);
      if (real) {
        const src = idx.reduce((a, v, d) => a + v * (ts[d] as number), 0) * eb;
        out.set(t.data.subarray(src, src + eb), dst);
      } else out.set(pad, dst);
    }
    rowBase += shape[0] as number;
  }
  return out;
}

describe('gatherBatch equals the element-wise reference', () => {
  it('any dtype, bucketed axis anywhere, dirty destination', () => {
    fc.assert(
      fc.property(
        fc.record({
          dtype: fc.constantFrom(...DTYPES.filter((d) => d !== 'bool')),
          inner: fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 1, maxLength: 3 }),
          members: fc.array(fc.record({ n: fc.integer({ min: 1, max: 3 }), len: fc.integer({ min: 1, max: 4 }) }), { minLength: 1, maxLength: 5 }),
          bucketed: fc.boolean(),
          axisPick: fc.nat(),
          extraBound: fc.integer({ min: 0, max: 2 }),
          extraRows: fc.integer({ min: 0, max: 3 }),
          pad: fc.integer({ min: 0, max: 100 }),
          dirty: fc.boolean(),
        }),
        ({ dtype, inner, members, bucketed, axisPick, extraBound, extraRows, pad, dirty }) => {
          const axis = bucketed ? 1 + (axisPick % inner.length) : undefined;
          const bound = axis === undefined ? undefined : Math.max(...members.map((m) => m.len)) + extraBound;
          let x = 7;
          const parts: Tensor[] = members.map(({ n, len }) => {
            const shape = [n, ...inner];
            if (axis !== undefined) shape[axis] = len;
            const data = new Uint8Array(tensorBytes(dtype, shape));
            for (let i = 0; i < data.length; i++) data[i] = ((x = (x * 1103515245 + 12345) >>> 0) >>> 24) | 1;
            return { dtype, shape, data };
          });
          const gear = members.reduce((a, m) => a + m.n, 0) + extraRows;
          const want = reference(parts, gear, axis, bound, pad);
          const into = dirty ? new Uint8Array(want.byteLength + 16).fill(0xab) : undefined;
          const got = gatherBatch(parts, { gear, ...(axis === undefined ? {} : { lengthAxis: axis, boundLength: bound, padValue: pad }), ...(into ? { into } : {}) });
          expect([...got.data]).toEqual([...want]);
          const views = scatterBatch(got, members.map((m) => m.n));
          expect(views.map((v) => v.shape[0])).toEqual(members.map((m) => m.n));
        },
      ),
      { numRuns: 500 },
    );
  });
});
