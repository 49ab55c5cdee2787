import { DTYPE_BYTES, type Dtype as DType } from '../contracts/tensor.ts';
import { FleetError } from '../errors/fleet-error.ts';

/**
 * Gather / scatter between per-request tensors and one batch buffer per model input/output.
 * Pure byte work on Uint8Array (little-endian element bytes, as on the wire and the device):
 * gather copies each request once into a contiguous batch buffer, zeroing the gear padding rows and
 * filling the variable-axis padding of bucketed inputs with a pad value; scatter hands each request
 * a VIEW of its rows of an output buffer (no copy — the views share the batch buffer's memory), or a
 * copy of its slots when the output's batch axis is not the leading one.
 */
// One dtype table for the whole project: the contracts' (pure data, no I/O).
export { DTYPES, DTYPE_BYTES } from '../contracts/tensor.ts';
export type { Dtype as DType } from '../contracts/tensor.ts';

export interface Tensor {
  readonly dtype: DType;
  /** shape[0] = samples. */
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

export interface GatherOptions {
  /** Rows of the batch buffer (>= Σ samples); rows past the members are zero. */
  readonly gear: number;
  /** Axis (>= 1) of the variable-length dimension, for bucketed inputs. */
  readonly lengthAxis?: number;
  /** Pad `lengthAxis` of every sample to this bound (the bucket's). Required with lengthAxis. */
  readonly boundLength?: number;
  /** Value written into the variable-axis padding. @defaultValue 0 */
  readonly padValue?: number;
  /** Destination (e.g. pinned staging) of at least the batch's bytes; a new buffer when absent. */
  readonly into?: Uint8Array;
}

export function elementCount(shape: readonly number[], from = 0): number {
  let n = 1;
  for (let i = from; i < shape.length; i++) n *= shape[i] as number;
  return n;
}

export function tensorBytes(dtype: DType, shape: readonly number[]): number {
  return elementCount(shape) * DTYPE_BYTES[dtype];
}

function invalid(message: string, details: Record<string, unknown> = {}): FleetError {
  return new FleetError('INVALID_ARGUMENT', message, { details });
}

/** Packs the members' tensors of one input into one batch tensor of `gear` rows. */
export function gatherBatch(parts: readonly Tensor[], options: GatherOptions): Tensor {
  const first = parts[0];
  if (first === undefined) throw invalid('gather needs at least one tensor');
  const { dtype } = first;
  const elementBytes = DTYPE_BYTES[dtype];
  const axis = options.lengthAxis;
  const bound = options.boundLength;
  if (axis !== undefined && (axis < 1 || axis >= first.shape.length || bound === undefined || bound < 0)) {
    throw invalid(`lengthAxis ${axis} needs 1 <= axis < rank ${first.shape.length} and a boundLength`, { axis, bound });
  }
  const outShape = [options.gear, ...first.shape.slice(1)];
  if (axis !== undefined) outShape[axis] = bound as number;
  let samples = 0;
  for (const [i, t] of parts.entries()) {
    checkPart(t, i, first, axis, bound);
    samples += t.shape[0] as number;
  }
  if (samples > options.gear) throw invalid(`${samples} samples do not fit gear ${options.gear}`, { samples, gear: options.gear });

  const totalBytes = elementCount(outShape) * elementBytes;
  const into = options.into;
  if (into !== undefined && into.byteLength < totalBytes) {
    throw invalid(`destination holds ${into.byteLength} bytes, the batch needs ${totalBytes}`, { totalBytes });
  }
  const out = into === undefined ? new Uint8Array(totalBytes) : into.subarray(0, totalBytes);
  const pad = encodeScalar(dtype, options.padValue ?? 0);
  const padIsZero = pad.every((b) => b === 0);
  const rowBytes = elementCount(outShape, 1) * elementBytes;
  let offset = 0;
  for (const t of parts) {
    const rows = t.shape[0] as number;
    const length = axis === undefined ? bound : (t.shape[axis] as number);
    if (axis === undefined || length === bound) {
      out.set(t.data, offset);
    } else {
      // Per outer slice: copy the real positions, then pad the rest of the axis.
      const innerBytes = elementCount(t.shape, axis + 1) * elementBytes;
      const srcChunk = (length as number) * innerBytes;
      const dstChunk = (bound as number) * innerBytes;
      const outer = elementCount(t.shape.slice(0, axis));
      for (let i = 0; i < outer; i++) {
        const dst = offset + i * dstChunk;
        out.set(t.data.subarray(i * srcChunk, (i + 1) * srcChunk), dst);
        if (!padIsZero || into !== undefined) fillPattern(out, dst + srcChunk, dst + dstChunk, pad);
      }
    }
    offset += rows * rowBytes;
  }
  // Gear padding rows are always zero (a fresh buffer already is).
  if (into !== undefined) out.fill(0, offset);
  return { dtype, shape: outShape, data: out };
}

function checkPart(t: Tensor, i: number, first: Tensor, axis: number | undefined, bound: number | undefined): void {
  if (t.dtype !== first.dtype) throw invalid(`tensor ${i} is ${t.dtype}, expected ${first.dtype}`, { index: i });
  if (t.shape.length !== first.shape.length) throw invalid(`tensor ${i} has rank ${t.shape.length}, expected ${first.shape.length}`, { index: i });
  for (let d = 1; d < t.shape.length; d++) {
    if (d === axis) {
      if ((t.shape[d] as number) > (bound as number)) throw invalid(`tensor ${i} length ${t.shape[d]} exceeds bound ${bound}`, { index: i });
    } else if (t.shape[d] !== first.shape[d]) {
      throw invalid(`tensor ${i} dim ${d} is ${t.shape[d]}, expected ${first.shape[d]}`, { index: i });
    }
  }
  const expected = tensorBytes(t.dtype, t.shape);
  if (t.data.byteLength !== expected) throw invalid(`tensor ${i} holds ${t.data.byteLength} bytes, shape needs ${expected}`, { index: i });
}

export interface ScatterOptions {
  /** Axis of the output that holds the batch (config.yaml's first -1). @defaultValue 0 */
  readonly batchAxis?: number;
  /**
   * Items the batch ran with. Given, the batch axis holds `size / gear` slots per item (a
   * flattened output [gear x 4] has 4); absent, one slot per item.
   */
  readonly gear?: number;
}

/**
 * Splits a batch output back per request by sample count, each request getting its items' slots
 * along the batch axis. Along axis 0 the tensors are views into `output.data` (valid only as long
 * as that buffer is not reused); along a later axis the slots are not contiguous, so copies.
 */
export function scatterBatch(output: Tensor, counts: readonly number[], options: ScatterOptions = {}): Tensor[] {
  const axis = options.batchAxis ?? 0;
  const size = output.shape[axis];
  if (size === undefined) throw invalid(`batch axis ${axis} is past the rank of [${output.shape.join(', ')}]`, { axis });
  const gear = options.gear;
  if (gear !== undefined && (gear < 1 || size < gear || size % gear !== 0)) {
    throw invalid(`batch axis ${axis} of [${output.shape.join(', ')}] holds ${size}, not a whole number of slots per item for gear ${gear}`, { axis, size, gear });
  }
  const slots = gear === undefined ? 1 : size / gear;
  const elementBytes = DTYPE_BYTES[output.dtype];
  const innerBytes = elementCount(output.shape, axis + 1) * elementBytes;
  const outer = elementCount(output.shape.slice(0, axis));
  let total = 0;
  for (const c of counts) total += c;
  if (total * slots > size) throw invalid(`${total} samples requested from an output of ${size / slots} along axis ${axis}`, { total, size });
  if (output.data.byteLength < outer * size * innerBytes) throw invalid('output buffer is shorter than its shape', { size });
  const views: Tensor[] = [];
  let at = 0;
  for (const c of counts) {
    const length = c * slots;
    const shape = output.shape.map((d, i) => (i === axis ? length : d));
    if (outer === 1) {
      views.push({ dtype: output.dtype, shape, data: output.data.subarray(at * innerBytes, (at + length) * innerBytes) });
    } else {
      const keep = length * innerBytes;
      const data = new Uint8Array(outer * keep);
      for (let o = 0; o < outer; o++) {
        const from = (o * size + at) * innerBytes;
        data.set(output.data.subarray(from, from + keep), o * keep);
      }
      views.push({ dtype: output.dtype, shape, data });
    }
    at += length;
  }
  return views;
}

/**
 * `output` with its `axis` cut from its padded size down to `length` (a per-position output of a
 * bucketed batch, back to one request's own length). A copy: the kept spans are not contiguous.
 */
export function cutAxis(output: Tensor, axis: number, length: number): Tensor {
  const padded = output.shape[axis];
  if (padded === undefined || length > padded) throw invalid(`cannot cut axis ${axis} of [${output.shape.join(', ')}] to ${length}`, { axis, length });
  if (length === padded) return output;
  const innerBytes = elementCount(output.shape, axis + 1) * DTYPE_BYTES[output.dtype];
  const outer = elementCount(output.shape.slice(0, axis));
  const keep = length * innerBytes;
  const data = new Uint8Array(outer * keep);
  for (let o = 0; o < outer; o++) data.set(output.data.subarray(o * padded * innerBytes, o * padded * innerBytes + keep), o * keep);
  return { dtype: output.dtype, shape: output.shape.map((d, i) => (i === axis ? length : d)), data };
}

/** Little-endian bytes of one element of `dtype` holding `value`. */
export function encodeScalar(dtype: DType, value: number): Uint8Array {
  const bytes = new Uint8Array(DTYPE_BYTES[dtype]);
  const view = new DataView(bytes.buffer);
  switch (dtype) {
    case 'float32':
      view.setFloat32(0, value, true);
      break;
    case 'float16':
      view.setUint16(0, float16Bits(value), true);
      break;
    case 'int8':
      view.setInt8(0, value);
      break;
    case 'uint8':
      view.setUint8(0, value);
      break;
    case 'int32':
      view.setInt32(0, value, true);
      break;
    case 'int64':
      view.setBigInt64(0, BigInt(Math.trunc(value)), true);
      break;
    case 'bool':
      view.setUint8(0, value ? 1 : 0);
      break;
  }
  return bytes;
}

/** IEEE 754 binary16 bits of `value`, round-to-nearest-even. */
export function float16Bits(value: number): number {
  const f32 = new Float32Array([value]);
  const x = new Uint32Array(f32.buffer)[0] as number;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    let m = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    if (rem > half || (rem === half && (m & 1) === 1)) m++;
    return sign | m;
  }
  let h = sign | (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1) === 1)) h++;
  return h;
}

function fillPattern(out: Uint8Array, start: number, end: number, pattern: Uint8Array): void {
  if (end <= start) return;
  if (pattern.length === 1 || pattern.every((b) => b === pattern[0])) {
    out.fill(pattern[0] as number, start, end);
    return;
  }
  out.set(pattern, start);
  // Double the written prefix until the range is full.
  let filled = pattern.length;
  while (filled < end - start) {
    const n = Math.min(filled, end - start - filled);
    out.copyWithin(start + filled, start, start + n);
    filled += n;
  }
}
