/**
 * A minimal protobuf wire-format encoder: just what ONNX's messages need (varints, zig-zag-free
 * int64 as two's complement, fixed32 floats, length-delimited bytes/strings/sub-messages and packed
 * repeated scalars). Written by hand so the model generator has no dependency on protoc,
 * protobufjs or Python.
 */

const WIRE_VARINT = 0;
const WIRE_FIXED32 = 5;
const WIRE_LENGTH_DELIMITED = 2;

const UINT64_MASK = (1n << 64n) - 1n;
const textEncoder = new TextEncoder();

export class ProtoWriter {
  private chunks: Uint8Array[] = [];
  private scratch: number[] = [];
  private length = 0;

  /** Bytes written so far. */
  get byteLength(): number {
    return this.length + this.scratch.length;
  }

  private flushScratch(): void {
    if (this.scratch.length === 0) return;
    this.chunks.push(Uint8Array.from(this.scratch));
    this.length += this.scratch.length;
    this.scratch = [];
  }

  private pushBytes(bytes: Uint8Array): void {
    this.flushScratch();
    this.chunks.push(bytes);
    this.length += bytes.length;
  }

  /**
   * Raw varint of a non-negative or negative 64-bit integer. Negative values are encoded as their
   * 64-bit two's complement (10 bytes), which is what protobuf does for int32/int64 fields.
   */
  rawVarint(value: number | bigint): this {
    let v = typeof value === 'bigint' ? value : BigInt(checkInteger(value));
    if (v < -(1n << 63n) || v > UINT64_MASK) throw new RangeError(`varint out of 64-bit range: ${v}`);
    v &= UINT64_MASK;
    while (v >= 0x80n) {
      this.scratch.push(Number(v & 0x7fn) | 0x80);
      v >>= 7n;
    }
    this.scratch.push(Number(v));
    return this;
  }

  private tag(field: number, wireType: number): void {
    if (!Number.isInteger(field) || field < 1 || field > 0x1fffffff) throw new RangeError(`bad field number ${field}`);
    this.rawVarint((field << 3) | wireType);
  }

  /** int32 / int64 / enum / bool field. */
  int(field: number, value: number | bigint): this {
    this.tag(field, WIRE_VARINT);
    return this.rawVarint(value);
  }

  /** float field (fixed32, little-endian IEEE 754 single). */
  float(field: number, value: number): this {
    this.tag(field, WIRE_FIXED32);
    const b = new Uint8Array(4);
    new DataView(b.buffer).setFloat32(0, value, true);
    for (const x of b) this.scratch.push(x);
    return this;
  }

  bytes(field: number, value: Uint8Array): this {
    this.tag(field, WIRE_LENGTH_DELIMITED);
    this.rawVarint(value.length);
    this.pushBytes(value);
    return this;
  }

  string(field: number, value: string): this {
    return this.bytes(field, textEncoder.encode(value));
  }

  /** Embedded message: encoded separately so its length prefix is known. */
  message(field: number, encode: (w: ProtoWriter) => void): this {
    const inner = new ProtoWriter();
    encode(inner);
    return this.bytes(field, inner.finish());
  }

  /** Packed repeated varints (proto3 default; proto2 `[packed = true]`). */
  packedInts(field: number, values: readonly (number | bigint)[]): this {
    const inner = new ProtoWriter();
    for (const v of values) inner.rawVarint(v);
    return this.bytes(field, inner.finish());
  }

  /** Packed repeated floats. */
  packedFloats(field: number, values: readonly number[]): this {
    const b = new Uint8Array(values.length * 4);
    const view = new DataView(b.buffer);
    values.forEach((v, i) => view.setFloat32(i * 4, v, true));
    return this.bytes(field, b);
  }

  finish(): Uint8Array {
    this.flushScratch();
    const out = new Uint8Array(this.length);
    let offset = 0;
    for (const c of this.chunks) {
      out.set(c, offset);
      offset += c.length;
    }
    return out;
  }
}

function checkInteger(value: number): number {
  if (!Number.isSafeInteger(value)) throw new RangeError(`not a safe integer: ${value}`);
  return value;
}
