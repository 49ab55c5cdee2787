import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { DTYPES, DTYPE_BYTES, encodeScalar, float16Bits, gatherBatch, scatterBatch, tensorBytes } from '../../../src/scheduler/index.ts';
import type { DType, Tensor } from '../../../src/scheduler/index.ts';

const bytes = (...xs: number[]) => new Uint8Array(xs);
const f32 = (...xs: number[]) => new Uint8Array(new Float32Array(xs).buffer);

describe('dtypes', () => {
  it.each([
    ['float32', 4],
    ['float16', 2],
    ['int8', 1],
    ['uint8', 1],
    ['int32', 4],
    ['int64', 8],
    ['bool', 1],
  ] as [DType, number][])('%s is %i bytes', (dtype, size) => {
    expect(DTYPE_BYTES[dtype]).toBe(size);
    expect(encodeScalar(dtype, 1).byteLength).toBe(size);
  });

  it.each([
    [1, 0x3c00],
    [-2, 0xc000],
    [65504, 0x7bff],
    [1e5, 0x7c00],
    [0.1, 0x2e66],
    [5.960464477539063e-8, 0x0001],
    [0, 0x0000],
    [Number.NaN, 0x7e00],
    [-Infinity, 0xfc00],
  ])('float16Bits(%d) = %i', (value, bits) => {
    expect(float16Bits(value)).toBe(bits);
  });

  it.each([
    ['int64', -1, [255, 255, 255, 255, 255, 255, 255, 255]],
    ['int32', 258, [2, 1, 0, 0]],
    ['bool', 5, [1]],
    ['int8', -1, [255]],
  ] as [DType, number, number[]][])('encodeScalar(%s, %d) is little-endian', (dtype, value, expected) => {
    expect([...encodeScalar(dtype, value)]).toEqual(expected);
  });
});

describe('gatherBatch', () => {
  it('packs members contiguously and zeroes the gear padding rows', () => {
    const a: Tensor = { dtype: 'float32', shape: [1, 2], data: f32(1, 2) };
    const b: Tensor = { dtype: 'float32', shape: [2, 2], data: f32(3, 4, 5, 6) };
    const out = gatherBatch([a, b], { gear: 4 });
    expect(out.shape).toEqual([4, 2]);
    expect([...new Float32Array(out.data.buffer, out.data.byteOffset, 8)]).toEqual([1, 2, 3, 4, 5, 6, 0, 0]);
  });

  it('pads the variable axis of each sample to the bound with the pad value', () => {
    // int32 tokens [n, len]; bound 4, pad id 9
    const a: Tensor = { dtype: 'int32', shape: [1, 2], data: new Uint8Array(new Int32Array([1, 2]).buffer) };
    const b: Tensor = { dtype: 'int32', shape: [2, 3], data: new Uint8Array(new Int32Array([3, 4, 5, 6, 7, 8]).buffer) };
    const out = gatherBatch([a, b], { gear: 4, lengthAxis: 1, boundLength: 4, padValue: 9 });
    expect(out.shape).toEqual([4, 4]);
    expect([...new Int32Array(out.data.buffer, out.data.byteOffset, 16)]).toEqual([1, 2, 9, 9, 3, 4, 5, 9, 6, 7, 8, 9, 0, 0, 0, 0]);
  });

  it('pads a middle axis (inner dims kept) and writes into a dirty destination', () => {
    // [n, len, 2] uint8, bound 3
    const a: Tensor = { dtype: 'uint8', shape: [1, 1, 2], data: bytes(1, 2) };
    const into = new Uint8Array(20).fill(0xee);
    const out = gatherBatch([a], { gear: 2, lengthAxis: 1, boundLength: 3, into });
    expect(out.data.buffer).toBe(into.buffer);
    expect([...out.data]).toEqual([1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    expect(into[12]).toBe(0xee); // bytes past the batch are untouched
  });

  it.each<{ name: string; parts: Tensor[]; gear: number; axis?: number; bound?: number }>([
    { name: 'dtype mismatch', parts: [{ dtype: 'uint8', shape: [1], data: bytes(1) }, { dtype: 'int8', shape: [1], data: bytes(1) }], gear: 2 },
    { name: 'trailing dim mismatch', parts: [{ dtype: 'uint8', shape: [1, 2], data: bytes(1, 2) }, { dtype: 'uint8', shape: [1, 3], data: bytes(1, 2, 3) }], gear: 2 },
    { name: 'bytes do not match shape', parts: [{ dtype: 'float32', shape: [1, 2], data: bytes(1, 2) }], gear: 1 },
    { name: 'more samples than the gear', parts: [{ dtype: 'uint8', shape: [3], data: bytes(1, 2, 3) }], gear: 2 },
    { name: 'length beyond the bound', parts: [{ dtype: 'uint8', shape: [1, 5], data: bytes(1, 2, 3, 4, 5) }], gear: 1, axis: 1, bound: 4 },
    { name: 'length axis 0', parts: [{ dtype: 'uint8', shape: [1, 1], data: bytes(1) }], gear: 1, axis: 0, bound: 4 },
    { name: 'no tensors', parts: [], gear: 1 },
  ])('rejects $name with INVALID_ARGUMENT', ({ parts, gear, axis, bound }) => {
    let error: unknown;
    try {
      gatherBatch(parts, { gear, lengthAxis: axis, boundLength: bound });
    } catch (e) {
      error = e;
    }
    expect(FleetError.is(error, 'INVALID_ARGUMENT')).toBe(true);
  });
});

describe('scatterBatch', () => {
  it('returns views (no copy) split by sample count', () => {
    const output: Tensor = { dtype: 'float32', shape: [4, 2], data: f32(1, 2, 3, 4, 5, 6, 7, 8) };
    const [a, b] = scatterBatch(output, [1, 2]);
    expect(a?.shape).toEqual([1, 2]);
    expect(b?.shape).toEqual([2, 2]);
    expect(a?.data.buffer).toBe(output.data.buffer);
    expect(b?.data.byteOffset).toBe(8);
    output.data[8] = 0x7f; // a write through the batch buffer is seen by the view
    expect(b?.data[0]).toBe(0x7f);
  });

  it('rejects asking for more samples than the output holds', () => {
    expect(() => scatterBatch({ dtype: 'uint8', shape: [2], data: bytes(1, 2) }, [2, 1])).toThrow(FleetError);
  });
});

describe('gather → scatter (property)', () => {
  const arbTensorSet = fc
    .record({
      dtype: fc.constantFrom(...DTYPES),
      inner: fc.array(fc.integer({ min: 1, max: 3 }), { maxLength: 2 }),
      counts: fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 6 }),
      extra: fc.integer({ min: 0, max: 3 }),
      seed: fc.integer(),
    })
    .map(({ dtype, inner, counts, extra, seed }) => {
      let x = seed;
      const parts = counts.map((n) => {
        const shape = [n, ...inner];
        const data = new Uint8Array(tensorBytes(dtype, shape));
        for (let i = 0; i < data.length; i++) data[i] = (x = (x * 1103515245 + 12345) >>> 0) >>> 24;
        return { dtype, shape, data } satisfies Tensor;
      });
      return { parts, counts, gear: counts.reduce((a, b) => a + b, 0) + extra };
    });

  it('each request gets back exactly its own bytes', () => {
    fc.assert(
      fc.property(arbTensorSet, ({ parts, counts, gear }) => {
        const batch = gatherBatch(parts, { gear });
        const views = scatterBatch(batch, counts);
        views.forEach((v, i) => {
          expect(v.shape).toEqual(parts[i]?.shape);
          expect(Buffer.from(v.data).equals(Buffer.from(parts[i]?.data ?? new Uint8Array()))).toBe(true);
        });
      }),
    );
  });

  it('bucketed: each request gets back its real positions, padding holds the pad value', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ n: fc.integer({ min: 1, max: 3 }), len: fc.integer({ min: 0, max: 5 }) }), { minLength: 1, maxLength: 5 }),
        fc.integer({ min: 0, max: 2 }),
        (specs, extraBound) => {
          const bound = Math.max(...specs.map((s) => s.len)) + extraBound;
          let v = 1;
          const parts: Tensor[] = specs.map(({ n, len }) => ({
            dtype: 'uint8',
            shape: [n, len],
            data: Uint8Array.from({ length: n * len }, () => (v = (v % 200) + 1)),
          }));
          const counts = specs.map((s) => s.n);
          const gear = counts.reduce((a, b) => a + b, 0) + 1;
          const batch = gatherBatch(parts, { gear, lengthAxis: 1, boundLength: bound, padValue: 255 });
          scatterBatch(batch, counts).forEach((view, i) => {
            const { n, len } = specs[i] as { n: number; len: number };
            for (let r = 0; r < n; r++) {
              const row = view.data.subarray(r * bound, (r + 1) * bound);
              expect([...row.subarray(0, len)]).toEqual([...(parts[i] as Tensor).data.subarray(r * len, (r + 1) * len)]);
              expect(row.subarray(len).every((b) => b === 255)).toBe(true);
            }
          });
          expect(batch.data.subarray(batch.data.length - bound).every((b) => b === 0)).toBe(true);
        },
      ),
    );
  });
});
