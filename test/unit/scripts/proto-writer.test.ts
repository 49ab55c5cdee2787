import { describe, expect, it } from 'vitest';
import { ProtoWriter } from '../../../scripts/onnx/proto-writer.ts';
import { decode, f32, sint64, str } from './proto-decoder.ts';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

describe('ProtoWriter', () => {
  it('encodes varints as protobuf does (spec examples)', () => {
    expect(hex(new ProtoWriter().int(1, 150).finish())).toBe('089601');
    expect(hex(new ProtoWriter().int(1, 0).finish())).toBe('0800');
    expect(hex(new ProtoWriter().int(1, 300).finish())).toBe('08ac02');
  });

  it('encodes negative int64 as 10-byte two\u2019s complement', () => {
    expect(hex(new ProtoWriter().int(3, -1).finish())).toBe('18ffffffffffffffffff01');
    const [f] = decode(new ProtoWriter().int(3, -9007199254740991n).finish());
    expect(f && sint64(f)).toBe(-9007199254740991n);
  });

  it('round-trips 64-bit extremes', () => {
    const w = new ProtoWriter().int(1, (1n << 63n) - 1n).int(2, -(1n << 63n));
    const [a, b] = decode(w.finish());
    expect(a && sint64(a)).toBe((1n << 63n) - 1n);
    expect(b && sint64(b)).toBe(-(1n << 63n));
  });

  it('rejects values that do not fit and unsafe JS integers', () => {
    expect(() => new ProtoWriter().int(1, 1n << 64n)).toThrow(RangeError);
    expect(() => new ProtoWriter().int(1, 2 ** 60)).toThrow(RangeError);
    expect(() => new ProtoWriter().int(1, 1.5)).toThrow(RangeError);
    expect(() => new ProtoWriter().int(0, 1)).toThrow(RangeError);
  });

  it('writes floats as little-endian fixed32 with wire type 5', () => {
    const bytes = new ProtoWriter().float(2, 1.5).finish();
    expect(hex(bytes)).toBe('150000c03f');
    const [f] = decode(bytes);
    expect(f && f32(f)).toBe(1.5);
  });

  it('length-prefixes strings (UTF-8), bytes and nested messages', () => {
    const bytes = new ProtoWriter()
      .string(1, 'testing')
      .message(3, (m) => m.int(1, 150))
      .bytes(4, new Uint8Array(200))
      .finish();
    expect(hex(bytes.subarray(0, 9))).toBe('0a0774657374696e67');
    const [s, m, b] = decode(bytes);
    expect(s && str(s)).toBe('testing');
    expect(m && hex(m.bytes ?? new Uint8Array())).toBe('089601');
    expect(b?.bytes?.length).toBe(200);
    expect(hex(new ProtoWriter().string(1, 'é').finish())).toBe('0a02c3a9');
  });

  it('packs repeated scalars into one length-delimited field', () => {
    expect(hex(new ProtoWriter().packedInts(4, [3, 270, 86942]).finish())).toBe('2206038e029ea705');
    const floats = new ProtoWriter().packedFloats(4, [1, -2]).finish();
    expect(hex(floats)).toBe('22080000803f000000c0');
  });

  it('keeps byteLength in step with the output', () => {
    const w = new ProtoWriter().int(1, 1).bytes(2, new Uint8Array(10)).int(3, 5);
    expect(w.byteLength).toBe(w.finish().length);
  });
});
