/**
 * A deliberately naive protobuf decoder used only to check the writer's output field by field.
 * Independent of the writer's code paths, so a symmetric bug cannot hide.
 */
export interface Field {
  field: number;
  wire: number;
  /** varint value (wire 0) */
  int?: bigint;
  /** fixed32 bytes (wire 5) or length-delimited payload (wire 2) */
  bytes?: Uint8Array;
}

export function decode(buf: Uint8Array): Field[] {
  const out: Field[] = [];
  let pos = 0;
  const varint = (): bigint => {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      if (pos >= buf.length) throw new Error('truncated varint');
      const b = buf[pos++] ?? 0;
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return result;
      shift += 7n;
    }
  };
  while (pos < buf.length) {
    const key = Number(varint());
    const field = key >>> 3;
    const wire = key & 7;
    if (wire === 0) out.push({ field, wire, int: varint() });
    else if (wire === 5) {
      out.push({ field, wire, bytes: buf.subarray(pos, pos + 4) });
      pos += 4;
    } else if (wire === 2) {
      const len = Number(varint());
      if (pos + len > buf.length) throw new Error('truncated bytes');
      out.push({ field, wire, bytes: buf.subarray(pos, pos + len) });
      pos += len;
    } else throw new Error(`unexpected wire type ${wire}`);
  }
  return out;
}

export function fields(buf: Uint8Array, field: number): Field[] {
  return decode(buf).filter((f) => f.field === field);
}

export function one(buf: Uint8Array, field: number): Field {
  const all = fields(buf, field);
  if (all.length !== 1) throw new Error(`field ${field}: expected 1 occurrence, got ${all.length}`);
  return all[0] as Field;
}

export function str(f: Field): string {
  return new TextDecoder().decode(f.bytes);
}

export function sint64(f: Field): bigint {
  return BigInt.asIntN(64, f.int ?? 0n);
}

export function f32(f: Field): number {
  const b = f.bytes ?? new Uint8Array(4);
  return new DataView(b.buffer, b.byteOffset, 4).getFloat32(0, true);
}
