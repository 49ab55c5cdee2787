/**
 * The differential oracle: runs a model on onnxruntime-node and on the simulator (through the
 * binding) with the same inputs and compares the outputs.
 *
 * Tolerance (issue 3: "within 1e-4 relative"). An element passes when
 *   |sim - ort| <= 1e-4 * max(|ort|, floor),   floor = max(1e-3, 1e-2 * rms(ort over the tensor))
 * i.e. relative error 1e-4 for every element whose magnitude is at least 1% of the tensor's RMS
 * (and at least 1e-3); smaller elements are judged as if they had that magnitude. Why the floor:
 * a float32 dot product of K terms carries a rounding error proportional to the size of its terms,
 * not of its result, so an output that is the near-cancellation of larger terms (e.g. 0.014 out
 * of a 144-term conv sum of O(1) terms) legitimately differs by >1e-4 of itself between two
 * correct kernels that merely sum in a different order. A wrong kernel (bad padding, stride,
 * broadcast, axis) is off by the size of a term, orders of magnitude above this floor.
 */
import * as ort from 'onnxruntime-node';
import type { Dim, OnnxDataType, ValueInfo } from '../../../scripts/onnx/onnx-model.ts';
import type { Prng } from '../../../scripts/onnx/prng.ts';

export const REL_TOLERANCE = 1e-4;
export const MAGNITUDE_FLOOR = 1e-3;
/** Fraction of the expected tensor's RMS below which magnitudes are floored (see above). */
export const RMS_FLOOR_FRACTION = 1e-2;

export interface HostTensor {
  name: string;
  dtype: OnnxDataType;
  dims: number[];
  data: Float32Array | BigInt64Array;
}

/** Resolves symbolic dims: "batch" → batch, any other name from `sizes`. */
export function concreteDims(dims: readonly Dim[], batch: number, sizes: Record<string, number> = {}): number[] {
  return dims.map((d) => {
    if (typeof d === 'number') return d;
    if (d === 'batch') return batch;
    const v = sizes[d];
    if (v === undefined) throw new Error(`no size for symbolic dim ${d}`);
    return v;
  });
}

export function randomInput(
  rng: Prng,
  info: ValueInfo,
  dims: number[],
  range: [number, number] = [-1, 1],
): HostTensor {
  const count = dims.reduce((a, b) => a * b, 1);
  if (info.dtype === 'float32') return { name: info.name, dtype: 'float32', dims, data: rng.float32Array(count, range[0], range[1]) };
  if (info.dtype === 'int64') return { name: info.name, dtype: 'int64', dims, data: rng.int64Array(count, range[0], range[1]) };
  throw new Error(`unsupported input dtype ${info.dtype}`);
}

export function toBytes(t: HostTensor): Uint8Array {
  return new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
}

export interface OutputTensor {
  dims: number[];
  data: Float32Array;
}

export async function runOrt(model: string | Uint8Array, inputs: HostTensor[]): Promise<Map<string, OutputTensor>> {
  const session = typeof model === 'string' ? await ort.InferenceSession.create(model) : await ort.InferenceSession.create(model);
  try {
    const feeds: Record<string, ort.Tensor> = {};
    for (const t of inputs) feeds[t.name] = new ort.Tensor(t.dtype === 'float32' ? 'float32' : 'int64', t.data, t.dims);
    const result = await session.run(feeds);
    const out = new Map<string, OutputTensor>();
    for (const name of session.outputNames) {
      const v = result[name];
      if (!v || !(v.data instanceof Float32Array)) throw new Error(`onnxruntime output ${name} is not float32`);
      out.set(name, { dims: [...v.dims], data: v.data });
    }
    return out;
  } finally {
    await session.release();
  }
}

export interface Mismatch {
  index: number;
  got: number;
  expected: number;
  /** |got - expected| / (REL_TOLERANCE * max(|expected|, floor)); > 1 fails. */
  ratio: number;
}

export interface Comparison {
  count: number;
  /** The magnitude floor used for this tensor. */
  floor: number;
  failures: number;
  worst: Mismatch | undefined;
  maxAbsError: number;
}

export function compare(got: ArrayLike<number>, expected: ArrayLike<number>): Comparison {
  if (got.length !== expected.length) throw new Error(`length ${got.length} != expected ${expected.length}`);
  let sumSquares = 0;
  for (let i = 0; i < expected.length; i++) sumSquares += (expected[i] ?? 0) ** 2;
  const rms = expected.length === 0 ? 0 : Math.sqrt(sumSquares / expected.length);
  const floor = Math.max(MAGNITUDE_FLOOR, RMS_FLOOR_FRACTION * rms);
  let failures = 0;
  let worst: Mismatch | undefined;
  let maxAbsError = 0;
  for (let i = 0; i < expected.length; i++) {
    const e = expected[i] ?? NaN;
    const g = got[i] ?? NaN;
    const err = Math.abs(g - e);
    const ratio = Number.isNaN(err) ? Infinity : err / (REL_TOLERANCE * Math.max(Math.abs(e), floor));
    if (!(ratio <= 1)) failures++;
    if (!(err <= maxAbsError)) maxAbsError = err;
    if (worst === undefined || !(ratio <= worst.ratio)) worst = { index: i, got: g, expected: e, ratio };
  }
  return { count: expected.length, floor, failures, worst, maxAbsError };
}

export function describeComparison(c: Comparison): string {
  const w = c.worst;
  return (
    `${c.failures}/${c.count} elements outside |a-b| <= ${REL_TOLERANCE}*max(|b|, ${c.floor.toExponential(2)}); ` +
    `max abs err ${c.maxAbsError.toExponential(2)}` +
    (w ? `; worst [${w.index}] got ${w.got} expected ${w.expected} (${w.ratio.toFixed(2)}x tolerance)` : '')
  );
}
