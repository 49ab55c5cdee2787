import { describe, expect, it } from 'vitest';
import { decodeRequestBinary, encodeRequestBinary } from '../../../src/codec/index.ts';
import { bytesOf, tensorView } from '../../../src/contracts/tensor.ts';

describe('tensorView', () => {
  // Kafka hands each message over as a Buffer sliced out of its fetch response, at any offset; the
  // decoded tensors are Buffer views of it. Buffer#slice is a view, not a copy (unlike
  // Uint8Array#slice), so the "copy when unaligned" path still built a misaligned Float32Array.
  it('reads a tensor decoded from a Buffer at an unaligned offset', () => {
    const frame = encodeRequestBinary({
      id: 'r',
      model: 'm',
      createdAt: 1,
      inputs: [{ name: 'x', dtype: 'float32', shape: [1, 2], data: bytesOf(Float32Array.of(1.5, -2)) }],
    });
    const fetched = Buffer.alloc(frame.byteLength + 3);
    frame.copy(fetched, 3);
    const data = decodeRequestBinary(fetched.subarray(3)).inputs[0]?.data ?? new Uint8Array();
    expect(data.byteOffset % 4).not.toBe(0);
    expect(Array.from(tensorView('float32', data))).toEqual([1.5, -2]);
    expect(tensorView('int64', Buffer.from(new Uint8Array(17).buffer, 1, 16))).toHaveLength(2);
  });
});
