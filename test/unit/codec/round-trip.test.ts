import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeRequest,
  decodeRequestBinary,
  decodeRequestJson,
  decodeResult,
  encodeRequestBinary,
  encodeRequestJson,
  encodeResult,
  requestFromJson,
  requestToJson,
} from '../../../src/codec/index.ts';
import { DTYPES, tensorView, bytesOf } from '../../../src/contracts/tensor.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { requestArb, resultArb } from './arbitraries.ts';

/** Compares envelopes with tensor bytes as plain arrays (views vs buffers compare by content). */
function normal(value: unknown): unknown {
  if (value instanceof Uint8Array) return Array.from(value);
  if (Array.isArray(value)) return value.map(normal);
  if (typeof value === 'object' && value !== null) {
    return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined).map(([k, v]) => [k, normal(v)]));
  }
  return value;
}

describe('codec round trip', () => {
  for (const dtype of DTYPES) {
    it(`binary and JSON round-trip requests of dtype ${dtype}`, () => {
      fc.assert(
        fc.property(requestArb(dtype), (req) => {
          expect(normal(decodeRequestBinary(encodeRequestBinary(req)))).toEqual(normal(req));
          expect(normal(decodeRequestJson(encodeRequestJson(req)))).toEqual(normal(req));
          expect(normal(requestFromJson(requestToJson(req)))).toEqual(normal(req));
          expect(normal(decodeRequest(encodeRequestJson(req)))).toEqual(normal(req));
        }),
        { numRuns: 150 },
      );
    });
  }

  it('round-trips results in both encodings', () => {
    fc.assert(
      fc.property(resultArb(), (res) => {
        expect(normal(decodeResult(encodeResult(res, 'binary')))).toEqual(normal(res));
        expect(normal(decodeResult(encodeResult(res, 'json')))).toEqual(normal(res));
      }),
      { numRuns: 300 },
    );
  });

  it('decodes float32 tensors as zero-copy views when the frame is aligned', () => {
    const values = Float32Array.from({ length: 3 * 4 * 4 }, (_, i) => i * 0.5);
    const req: RequestEnvelope = {
      id: 'r1',
      model: 'cnn',
      createdAt: 1,
      inputs: [
        { name: 'tag', dtype: 'uint8', shape: [1, 3], data: new Uint8Array([1, 2, 3]) },
        { name: 'image', dtype: 'float32', shape: [1, 3, 4, 4], data: bytesOf(values) },
      ],
    };
    const frame = encodeRequestBinary(req);
    const aligned = new Uint8Array(new ArrayBuffer(frame.byteLength));
    aligned.set(frame);
    const decoded = decodeRequestBinary(aligned);
    const image = decoded.inputs[1];
    expect(image?.data.buffer).toBe(aligned.buffer); // a view, not a copy
    const view = tensorView('float32', image?.data ?? new Uint8Array());
    expect(view.buffer).toBe(aligned.buffer);
    expect(Array.from(view)).toEqual(Array.from(values));
  });

  it('copies only when the frame sits at an unaligned offset', () => {
    const req: RequestEnvelope = {
      id: 'r2',
      model: 'm',
      createdAt: 1,
      inputs: [{ name: 'x', dtype: 'float32', shape: [1, 2], data: bytesOf(Float32Array.of(1.5, -2)) }],
    };
    const frame = encodeRequestBinary(req);
    const backing = new Uint8Array(frame.byteLength + 1);
    backing.set(frame, 1);
    const decoded = decodeRequestBinary(backing.subarray(1));
    const view = tensorView('float32', decoded.inputs[0]?.data ?? new Uint8Array());
    expect(Array.from(view)).toEqual([1.5, -2]);
  });
});
