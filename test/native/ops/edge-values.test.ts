/**
 * Edge values and attribute corners of single-op models, run on the simulator (through the
 * binding) and on onnxruntime with the same fixed inputs. Unlike ops-differential.test.ts the
 * inputs are hand-picked (NaN, ±Inf, -0) and every shape is static, so NaN must come out where
 * onnxruntime puts NaN, and ±Inf where it puts ±Inf.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { attr, encodeModel, type AttributeValue, type GraphDef, type TensorData } from '../../../scripts/onnx/onnx-model.ts';
import * as ort from 'onnxruntime-node';
import type { HostTensor } from './differential.ts';
import { openSimDevice, type SimDeviceHandle } from './sim-runner.ts';

interface EdgeCase {
  name: string;
  op: string;
  /** Graph inputs x0, x1, ... (float32, static shapes); a Float32Array keeps NaN payloads. */
  inputs: { dims: number[]; data: number[] | Float32Array }[];
  initializers?: TensorData[];
  attributes?: Record<string, AttributeValue>;
  opset?: number;
  /** The node's inputs, when not the graph inputs then the initializers ('' skips an optional one). */
  nodeInputs?: string[];
  /**
   * Outputs expected to be NaN or -Inf although onnxruntime gives another value (Conv: see
   * Conv/inf-weight-over-pads). Its max kernels
   * (MaxPool, GlobalMaxPool, ReduceMax) drop or keep a NaN depending on the kernel path and the
   * tap order (MLAS keeps it only when it is the last tap), count pads as -FLT_MAX taps and start
   * some paths at -FLT_MAX, so a window of -Inf can come out -FLT_MAX. The simulator propagates
   * every NaN and ignores pads (native/acl-sim/README.md); everything else must match.
   */
  ortDiffers?: { nan?: number[]; negInf?: number[] };
  /** Output element type (Cast); an integer output is compared bit for bit. */
  outType?: 'int64' | 'int32';
  /** Pass-through ops: the output must equal onnxruntime's bit for bit (NaN payloads, -0). */
  exact?: boolean;
}

/** NaN, both infinities, signed zero and ordinary values, repeated to fill a tensor. */
const SPECIALS = [NaN, Infinity, -Infinity, 1, -2, 0.5, -0, 3];
const specials = (n: number): number[] => Array.from({ length: n }, (_, i) => SPECIALS[i % SPECIALS.length] ?? 0);
const NAN = NaN;
const INF = Infinity;
/** Inputs of the unary maths: specials, negatives (Log/Sqrt), overflow and denormal corners. */
const UNARY = [NAN, INF, -INF, 0, -0, 1, -1, 0.5, -0.5, 3, -3, 20, -20, 100, -100, 1e-30, -1e-30, 1e-45, 88.8, -104];
/** Every pair of V: x0[i][j] = V[i], x1[i][j] = V[j]. */
const V = [NAN, INF, -INF, 0, -0, 1, -1, 2, 0.5, -3];
const pairs = { a: V.flatMap((v) => V.map(() => v)), b: V.flatMap(() => V) };
/** Quiet NaNs with payloads (positive and negative), a signalling NaN, -0 and plain values. */
const PAYLOADS = new Float32Array(Uint32Array.from([0x7fc12345, 0xffc00001, 0x7f800001, 0x80000000, 0x7f800000, 0xff800000, 0x3f800000, 0xc0000000, 0x7fffffff, 0x00000001, 0xff812345, 0x40400000]).buffer);
/** Mostly small finite values and zeros, with NaN, +Inf, -Inf and -0 every `seed`-dependent few elements. */
const sparse = (n: number, seed: number): number[] =>
  Array.from({ length: n }, (_, i) => {
    const k = (i * 7 + seed * 13) % 97;
    return k === 0 ? NAN : k === 1 ? INF : k === 2 ? -INF : k < 20 ? 0 : k < 25 ? -0 : ((k % 9) - 4) / 4;
  });
const f32 = (name: string, dims: number[], values: number[]): TensorData => ({ name, dtype: 'float32', dims, values: Float32Array.from(values) });
const i64 = (name: string, values: number[]): TensorData => ({ name, dtype: 'int64', dims: [values.length], values: BigInt64Array.from(values.map(BigInt)) });
const x = (dims: number[], data: number[] | Float32Array) => ({ dims, data });

const unaryCases = (['Relu', 'Sigmoid', 'Tanh', 'Exp', 'Log', 'Sqrt', 'Neg', 'Abs', 'Erf', 'Reciprocal', 'Elu', 'LeakyRelu'] as const).map(
  (op): EdgeCase => ({ name: `${op}/edges`, op, inputs: [x([4, 5], UNARY)] }),
);
const binaryCases = (['Add', 'Sub', 'Mul', 'Div', 'Pow'] as const).flatMap((op): EdgeCase[] => [
  { name: `${op}/pairs`, op, inputs: [x([10, 10], pairs.a), x([10, 10], pairs.b)] },
  // The broadcasting odometer and the scalar paths.
  { name: `${op}/broadcast`, op, inputs: [x([10, 1], V), x([1, 10], V)] },
  { name: `${op}/scalar-rhs`, op, inputs: [x([2, 10], [...V, ...V.map((v) => -v)]), x([1], [op === 'Pow' ? 2 : -0])] },
  { name: `${op}/scalar-lhs`, op, inputs: [x([1], [op === 'Pow' ? -INF : INF]), x([2, 10], [...V, ...V.map((v) => -v)])] },
]);
/** Softmax rows: +Inf, all -Inf, NaN, -Inf among finite, two +Inf, ±Inf, huge spread, -0. */
const SOFTMAX_ROWS = [INF, 0, 1, 2, -INF, -INF, -INF, -INF, NAN, 1, 2, 3, -INF, 0, 1, 2, INF, INF, 0, 0, -INF, INF, 0, 0, 1e30, -1e30, 0, 0, -0, 0, -0, 0];
const softmaxCases = (['Softmax', 'LogSoftmax'] as const).flatMap((op): EdgeCase[] => [
  { name: `${op}/rows`, op, inputs: [x([8, 4], SOFTMAX_ROWS)], opset: 13 },
  { name: `${op}/axis0`, op, inputs: [x([4, 8], SOFTMAX_ROWS)], opset: 13, attributes: { axis: attr.i(0) } },
  { name: `${op}/opset11-2d`, op, inputs: [x([4, 2, 4], SOFTMAX_ROWS)], opset: 11, attributes: { axis: attr.i(1) } },
]);
/** 4x4 planes: all NaN, all -Inf, NaN first / last / among finite, +Inf with -Inf. */
const POOL_PLANES = [
  ...Array<number>(16).fill(NAN),
  ...Array<number>(16).fill(-INF),
  ...[NAN, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, NAN],
  ...[1, NAN, -INF, 2, INF, -INF, 3, NAN, -0, -0, -1, -2, -INF, -INF, -INF, -INF],
];
const MAXPOOL_ORT_DIFFERS: Record<string, EdgeCase['ortDiffers']> = {
  k2s2: { nan: [8, 12] },
  'k3-pads': { nan: [3, 7, 11, 15, 32, 33, 36, 37, 43, 47, 48, 49, 51, 52, 53, 54, 55, 58, 59], negInf: [16, 19, 20, 23, 24, 27, 28, 31] },
  'k2-ceil': { nan: [0, 1, 2, 3, 8, 11, 12, 13], negInf: [4, 5, 6, 7, 14, 15] },
};
const poolCases = (op: 'MaxPool' | 'AveragePool'): EdgeCase[] => {
  const windows: Record<string, Record<string, AttributeValue>> = {
    k2s2: { kernel_shape: attr.ints([2, 2]), strides: attr.ints([2, 2]) },
    'k3-pads': { kernel_shape: attr.ints([3, 3]), pads: attr.ints([1, 1, 1, 1]), ...(op === 'AveragePool' ? { count_include_pad: attr.i(1) } : {}) },
    'k2-ceil': { kernel_shape: attr.ints([2, 2]), strides: attr.ints([3, 3]), ceil_mode: attr.i(1) },
  };
  return Object.entries(windows).map(([k, attributes]) => ({
    name: `${op}/${k}`,
    op,
    inputs: [x([1, 4, 4, 4], POOL_PLANES)],
    attributes,
    ...(op === 'MaxPool' ? { ortDiffers: MAXPOOL_ORT_DIFFERS[k] } : {}),
  }));
};
const reduceCases = (op: 'ReduceMax' | 'ReduceMean' | 'ReduceSum'): EdgeCase[] => [
  { name: `${op}/rows`, op, inputs: [x([8, 4], SOFTMAX_ROWS)], opset: 11, attributes: { axes: attr.ints([1]), keepdims: attr.i(0) } },
  // onnxruntime's ReduceMax keeps a NaN only when it comes first in the reduced run.
  { name: `${op}/cols`, op, inputs: [x([4, 8], SOFTMAX_ROWS)], opset: 11, attributes: { axes: attr.ints([0]) }, ...(op === 'ReduceMax' ? { ortDiffers: { nan: [0] } } : {}) },
  { name: `${op}/all`, op, inputs: [x([2, 3], [-INF, -INF, -INF, -INF, NAN, -INF])], opset: 11, ...(op === 'ReduceMax' ? { ortDiffers: { nan: [0] } } : {}) },
];
/** Gemm/MatMul operands: Inf and NaN against zeros. */
const GA = [INF, 1, 2, 0, -INF, 3, NAN, 0, 1, -0, -0, -0];
const GB = [0, 1, 2, 0, 3, 4, -0, 5, 0, INF, 0, 1];
const passThrough: EdgeCase[] = [
  { name: 'Identity/payload', op: 'Identity', inputs: [x([3, 4], PAYLOADS)], exact: true },
  { name: 'Dropout/payload', op: 'Dropout', inputs: [x([3, 4], PAYLOADS)], exact: true },
  { name: 'Flatten/payload', op: 'Flatten', inputs: [x([2, 3, 2], PAYLOADS)], exact: true, attributes: { axis: attr.i(2) } },
  { name: 'Reshape/payload', op: 'Reshape', inputs: [x([3, 4], PAYLOADS)], initializers: [i64('shape', [0, 2, -1])], exact: true },
  { name: 'Transpose/payload', op: 'Transpose', inputs: [x([2, 3, 2], PAYLOADS)], attributes: { perm: attr.ints([2, 0, 1]) }, exact: true },
  { name: 'Concat/payload', op: 'Concat', inputs: [x([3, 4], PAYLOADS), x([3, 1], specials(3))], attributes: { axis: attr.i(1) }, exact: true },
  { name: 'Gather/payload', op: 'Gather', inputs: [x([4, 3], PAYLOADS)], initializers: [i64('idx', [3, -4, 1, 1])], exact: true },
  { name: 'Squeeze/payload', op: 'Squeeze', inputs: [x([3, 1, 4], PAYLOADS)], initializers: [i64('axes', [1])], exact: true },
  { name: 'Unsqueeze/payload', op: 'Unsqueeze', inputs: [x([3, 4], PAYLOADS)], initializers: [i64('axes', [0, -1])], exact: true },
  // Out-of-range, NaN and infinite floats to integers: C++ leaves them undefined; onnxruntime's
  // static_cast gives the CPU's answer (x86: the minimum integer), so must the simulator's.
  { name: 'Cast/to-int64', op: 'Cast', inputs: [x([4, 5], [...UNARY.slice(0, 16), 9.3e18, -9.3e18, 2.5, -2.5])], attributes: { to: attr.i(7) }, outType: 'int64' },
  { name: 'Cast/to-int32', op: 'Cast', inputs: [x([4, 5], [...UNARY.slice(0, 16), 3e9, -3e9, 2.5, -2.5])], attributes: { to: attr.i(6) }, outType: 'int32' },
  { name: 'Cast/payload', op: 'Cast', inputs: [x([3, 4], PAYLOADS)], attributes: { to: attr.i(1) }, exact: true },
  // Sign-bit ops keep the payload.
  { name: 'Neg/payload', op: 'Neg', inputs: [x([3, 4], PAYLOADS)], exact: true },
  { name: 'Abs/payload', op: 'Abs', inputs: [x([3, 4], PAYLOADS)], exact: true },
];

const CASES: EdgeCase[] = [
  // Relu(NaN) is NaN in onnxruntime (and in max(x, 0) with NaN propagation); a `x > 0 ? x : 0`
  // kernel turns it into 0 and hides a poisoned activation.
  { name: 'Relu/nan-inf', op: 'Relu', inputs: [{ dims: [2, 8], data: specials(16) }] },
  { name: 'LeakyRelu/nan-inf', op: 'LeakyRelu', inputs: [{ dims: [2, 8], data: specials(16) }], attributes: { alpha: attr.f(0.2) } },
  // A row holding +Inf, or only -Inf, is NaN throughout in onnxruntime.
  { name: 'Softmax/inf-rows', op: 'Softmax', inputs: [{ dims: [3, 4], data: [Infinity, 0, 1, 2, -Infinity, -Infinity, -Infinity, -Infinity, NaN, 1, 2, 3] }], opset: 13 },
  ...unaryCases,
  { name: 'Elu/alpha', op: 'Elu', inputs: [x([4, 5], UNARY)], attributes: { alpha: attr.f(0.5) } },
  ...binaryCases,
  { name: 'Clip/inputs', op: 'Clip', inputs: [x([4, 5], UNARY)], initializers: [f32('lo', [], [-1]), f32('hi', [], [2])], opset: 13 },
  { name: 'Clip/min-over-max', op: 'Clip', inputs: [x([4, 5], UNARY)], initializers: [f32('lo', [], [2]), f32('hi', [], [-1])], opset: 13 },
  // No bound is ±FLT_MAX (the spec's defaults), not ±Inf: infinities clamp to the largest finite.
  { name: 'Clip/no-bounds', op: 'Clip', inputs: [x([4, 5], UNARY)], opset: 13 },
  { name: 'Clip/max-only', op: 'Clip', inputs: [x([4, 5], UNARY)], initializers: [f32('hi', [], [2])], nodeInputs: ['x0', '', 'hi'], opset: 13 },
  { name: 'Clip/opset6-min-only', op: 'Clip', inputs: [x([4, 5], UNARY)], attributes: { min: attr.f(-0.5) }, opset: 6 },
  { name: 'Clip/opset6-attrs', op: 'Clip', inputs: [x([4, 5], UNARY)], attributes: { min: attr.f(-0.5), max: attr.f(0.5) }, opset: 6 },
  ...softmaxCases,
  // Windows all NaN, all -Inf, and NaN first, last or among finite values.
  ...poolCases('MaxPool'),
  { name: 'MaxPool/dilated', op: 'MaxPool', inputs: [x([1, 4, 4, 4], POOL_PLANES)], attributes: { kernel_shape: attr.ints([2, 2]), dilations: attr.ints([2, 2]) }, ortDiffers: { nan: [11, 15] } },
  { name: 'GlobalMaxPool/planes', op: 'GlobalMaxPool', inputs: [x([1, 4, 4, 4], POOL_PLANES)], ortDiffers: { nan: [3], negInf: [1] } },
  ...poolCases('AveragePool'),
  { name: 'AveragePool/k3-pads-exclude', op: 'AveragePool', inputs: [x([1, 4, 4, 4], POOL_PLANES)], attributes: { kernel_shape: attr.ints([3, 3]), pads: attr.ints([1, 1, 1, 1]) } },
  { name: 'GlobalAveragePool/planes', op: 'GlobalAveragePool', inputs: [x([1, 4, 4, 4], POOL_PLANES)] },
  ...reduceCases('ReduceMax'),
  { name: 'ReduceMax/opset18-axes-input', op: 'ReduceMax', inputs: [x([8, 4], SOFTMAX_ROWS)], initializers: [i64('axes', [1])], opset: 18 },
  ...reduceCases('ReduceMean'),
  ...reduceCases('ReduceSum'),
  { name: 'ReduceSum/axes-input', op: 'ReduceSum', inputs: [x([8, 4], SOFTMAX_ROWS)], initializers: [i64('axes', [-1])], opset: 13 },
  {
    // scale 0 against Inf, a negative variance (sqrt < 0), variance -eps (divide by 0), Inf mean.
    name: 'BatchNormalization/params',
    op: 'BatchNormalization',
    inputs: [x([2, 4, 2], specials(16))],
    initializers: [f32('scale', [4], [0, 1, 2, -1]), f32('B', [4], [0, NAN, 1, -1]), f32('mean', [4], [0, 1, INF, 0]), f32('var', [4], [1, -4, 1, -1e-5])],
  },
  { name: 'BatchNormalization/x', op: 'BatchNormalization', inputs: [x([2, 2, 4], UNARY.slice(0, 16))], initializers: [f32('scale', [2], [1, -0.5]), f32('B', [2], [0, 2]), f32('mean', [2], [0.5, -1]), f32('var', [2], [4, 0])] },
  { name: 'Gemm/inf-times-zero', op: 'Gemm', inputs: [x([3, 4], GA), x([4, 3], GB)] },
  { name: 'Gemm/packed-B-transposed', op: 'Gemm', inputs: [x([3, 4], GA)], initializers: [f32('B', [3, 4], GB)], attributes: { transB: attr.i(1) } },
  { name: 'Gemm/transA-alpha-C', op: 'Gemm', inputs: [x([4, 3], GA), x([4, 3], GB)], initializers: [f32('C', [3], [NAN, -INF, 1])], attributes: { transA: attr.i(1), alpha: attr.f(-2), beta: attr.f(0.5) } },
  { name: 'Gemm/beta0-nan-C', op: 'Gemm', inputs: [x([3, 4], GA), x([4, 3], GB)], initializers: [f32('C', [3, 3], specials(9))], attributes: { beta: attr.f(0) } },
  // alpha = 0 still multiplies A·B: 0 * Inf is NaN (BLAS would skip A and B, onnxruntime does not).
  { name: 'Gemm/alpha0', op: 'Gemm', inputs: [x([3, 4], GA), x([4, 3], GB)], initializers: [f32('C', [1, 3], [1, 2, 3])], attributes: { alpha: attr.f(0) } },
  { name: 'Gemm/alpha0-row', op: 'Gemm', inputs: [x([1, 4], [INF, 0, -0, 1]), x([3, 4], GB)], attributes: { alpha: attr.f(0), transB: attr.i(1) } },
  { name: 'Gemm/alpha0-packed', op: 'Gemm', inputs: [x([3, 4], GA)], initializers: [f32('B', [4, 3], GB)], attributes: { alpha: attr.f(0) } },
  { name: 'Gemm/row', op: 'Gemm', inputs: [x([1, 4], [INF, 0, -0, 1]), x([4, 3], GB)] },
  { name: 'MatMul/inf-times-zero', op: 'MatMul', inputs: [x([3, 4], GA), x([4, 3], GB)] },
  { name: 'MatMul/packed-B', op: 'MatMul', inputs: [x([3, 4], GA)], initializers: [f32('B', [4, 3], GB)] },
  { name: 'MatMul/vector', op: 'MatMul', inputs: [x([4], [INF, 0, -0, NAN]), x([4, 3], GB)] },
  { name: 'MatMul/batched', op: 'MatMul', inputs: [x([2, 3, 2], GA), x([2, 2, 3], GB)] },
  { name: 'MatMul/tiles', op: 'MatMul', inputs: [x([7, 20], Array.from({ length: 140 }, (_, i) => (i === 45 ? INF : i === 99 ? NAN : i % 5 === 0 ? -0 : ((i % 7) - 3) / 4)))], initializers: [f32('B', [20, 17], Array.from({ length: 340 }, (_, i) => (i % 9 === 0 ? 0 : ((i % 11) - 5) / 8)))] },
  {
    name: 'Conv/pads-inf',
    op: 'Conv',
    inputs: [x([1, 2, 4, 4], [...POOL_PLANES.slice(32, 48), ...Array.from({ length: 16 }, (_, i) => i / 4 - 1)])],
    initializers: [f32('W', [3, 2, 3, 3], Array.from({ length: 54 }, (_, i) => (i === 20 ? INF : i % 4 === 0 ? 0 : ((i % 5) - 2) / 2))), f32('b', [3], [0, NAN, 1])],
    attributes: { pads: attr.ints([1, 1, 1, 1]) },
  },
  { name: 'Conv/1x1-depthwise', op: 'Conv', inputs: [x([1, 4, 2, 2], specials(16))], initializers: [f32('W', [4, 1, 1, 1], [0, 1, -0, 2])], attributes: { group: attr.i(4) } },
  // Big enough for the blocked kernels: AVX2 tiles with ragged edges, the thread grid, and Conv's
  // packed im2col, with Inf and NaN against zero weights.
  { name: 'MatMul/grid', op: 'MatMul', inputs: [x([40, 50], sparse(2000, 3)), x([50, 45], sparse(2250, 5))] },
  { name: 'Gemm/grid-packed', op: 'Gemm', inputs: [x([50, 40], sparse(2000, 3))], initializers: [f32('B', [45, 50], sparse(2250, 5)), f32('C', [45], sparse(45, 1))], attributes: { transA: attr.i(1), transB: attr.i(1) } },
  { name: 'Conv/blocked-stride2', op: 'Conv', inputs: [x([2, 3, 12, 12], sparse(864, 3))], initializers: [f32('W', [8, 3, 3, 3], sparse(216, 7).map((v) => (Number.isFinite(v) ? v : 0)))], attributes: { pads: attr.ints([1, 1, 1, 1]), strides: attr.ints([2, 2]) } },
  // A ±Inf or NaN weight over zero padding: the simulator multiplies the pad's 0 (NaN, as ONNX
  // defines pads and as onnxruntime's im2col path does, e.g. the dilated depthwise case); its
  // NCHWc kernels (Cin < 8 or Cout % 8 == 0 here) skip padded taps and leave a finite value.
  { name: 'Conv/inf-weight-over-pads', ortDiffers: { nan: [7, 8, 12, 13, 14, 15, 24, 28] }, op: 'Conv', inputs: [x([1, 1, 4, 4], [...specials(8), 1, 2, 3, 4, 5, 6, 7, 8])], initializers: [f32('W', [2, 1, 3, 3], [INF, 0, 0, 0, 1, 0, 0, 0, -INF, NAN, 0, 0, 0, 2, 0, 0, 0, 0]), f32('b', [2], [0.5, -1])], attributes: { pads: attr.ints([1, 1, 1, 1]) } },
  { name: 'Conv/depthwise-pads-dilated', op: 'Conv', inputs: [x([1, 2, 5, 5], sparse(50, 4))], initializers: [f32('W', [2, 1, 2, 2], [INF, 1, 0, -1, 2, NAN, 1, 0])], attributes: { group: attr.i(2), pads: attr.ints([2, 1, 0, 2]), dilations: attr.ints([2, 2]) } },
  { name: 'Conv/same-lower', ortDiffers: { nan: [0, 3, 6, 11, 14, 15, 16] }, op: 'Conv', inputs: [x([1, 2, 5, 5], sparse(50, 2))], initializers: [f32('W', [3, 2, 3, 3], sparse(54, 1))], attributes: { auto_pad: attr.s('SAME_LOWER'), strides: attr.ints([2, 2]) } },
  { name: 'Conv/1x1', op: 'Conv', inputs: [x([1, 4, 5, 5], sparse(100, 3))], initializers: [f32('W', [6, 4, 1, 1], sparse(24, 2))] },
  { name: 'MaxPool/same-upper', op: 'MaxPool', inputs: [x([1, 4, 4, 4], POOL_PLANES)], attributes: { kernel_shape: attr.ints([3, 3]), strides: attr.ints([2, 2]), auto_pad: attr.s('SAME_UPPER') }, ortDiffers: { nan: [1, 3, 8, 11, 12, 13], negInf: [5, 7] } },
  { name: 'AveragePool/same-lower', op: 'AveragePool', inputs: [x([1, 4, 4, 4], POOL_PLANES)], attributes: { kernel_shape: attr.ints([3, 3]), strides: attr.ints([2, 2]), auto_pad: attr.s('SAME_LOWER') } },
  ...passThrough,
];

const dir = mkdtempSync(join(tmpdir(), 'sim-edge-'));
let device: SimDeviceHandle;
beforeAll(async () => {
  device = await openSimDevice(0);
});
afterAll(async () => {
  await device?.close();
  rmSync(dir, { recursive: true, force: true });
});

function graphOf(c: EdgeCase, outDims: number[]): GraphDef {
  const inputs = c.inputs.map((t, i) => ({ name: `x${i}`, dtype: 'float32' as const, dims: t.dims }));
  const initializers = c.initializers ?? [];
  return {
    name: c.name.replace(/\W/g, '_'),
    nodes: [{ opType: c.op, name: 'n', inputs: c.nodeInputs ?? [...inputs.map((i) => i.name), ...initializers.map((t) => t.name)], outputs: ['y'], attributes: c.attributes ?? {} }],
    inputs,
    outputs: [{ name: 'y', dtype: c.outType ?? 'float32', dims: outDims }],
    initializers,
  };
}

function encode(c: EdgeCase, outDims: number[]): Uint8Array {
  const opset = c.opset ?? 17;
  return encodeModel({ graph: graphOf(c, outDims), irVersion: opset >= 13 ? 8 : 7, opsetImports: [{ domain: '', version: opset }] });
}

/**
 * onnxruntime's output with its bytes seen as float32 words (as the simulator side returns them),
 * so an integer output can be compared bit for bit too.
 */
async function runOrtWords(model: string | Uint8Array, inputs: HostTensor[]): Promise<{ dims: number[]; data: Float32Array }> {
  const session = typeof model === 'string' ? await ort.InferenceSession.create(model) : await ort.InferenceSession.create(model);
  try {
    const feeds: Record<string, ort.Tensor> = {};
    for (const t of inputs) feeds[t.name] = new ort.Tensor('float32', t.data, t.dims);
    const y = (await session.run(feeds))['y'];
    if (!y || !ArrayBuffer.isView(y.data)) throw new Error('onnxruntime gave no numeric output y');
    const bytes = new Uint8Array(y.data.byteLength);
    bytes.set(new Uint8Array(y.data.buffer, y.data.byteOffset, y.data.byteLength));
    return { dims: [...y.dims], data: new Float32Array(bytes.buffer) };
  } finally {
    await session.release();
  }
}

/** Same value, NaN for NaN, same infinity; finite values within 1e-5 relative (1e-6 absolute). */
function sameValue(got: number, want: number): boolean {
  if (Number.isNaN(want) || !Number.isFinite(want)) return Object.is(got, want) || (Number.isNaN(got) && Number.isNaN(want));
  return Math.abs(got - want) <= 1e-5 * Math.abs(want) + 1e-6;
}

describe('simulator edge values vs onnxruntime', () => {
  it.each(CASES.map((c) => [c.name, c] as const))('%s', async (name, c) => {
    const inputs: HostTensor[] = c.inputs.map((t, i) => ({ name: `x${i}`, dtype: 'float32', dims: t.dims, data: t.data instanceof Float32Array ? t.data : Float32Array.from(t.data) }));
    // The output shape comes from onnxruntime, then both run a fully static model.
    const outDims = (await runOrtWords(encode(c, []), inputs)).dims;
    const path = join(dir, `${name.replace(/\W/g, '_')}.onnx`);
    writeFileSync(path, encode(c, outDims));
    const want = await runOrtWords(path, inputs);
    const model = await device.load(path, [], {});
    try {
      // A static model's "gear" is its leading input dim.
      const [got] = await model.run(inputs, c.inputs[0]?.dims[0] ?? 1);
      expect(got?.dims).toEqual(want?.dims);
      const bad: string[] = [];
      const w = want.data;
      const gotBits = new Uint32Array(got?.data.buffer ?? new ArrayBuffer(0), got?.data.byteOffset, got?.data.length);
      const wantBits = new Uint32Array(w.buffer, w.byteOffset, w.length);
      const hex = (v: number | undefined) => `0x${(v ?? 0).toString(16).padStart(8, '0')}`;
      const differs = new Map<number, number>([...(c.ortDiffers?.nan ?? []).map((i) => [i, NaN] as const), ...(c.ortDiffers?.negInf ?? []).map((i) => [i, -Infinity] as const)]);
      for (let i = 0; i < w.length; i++) {
        const g = got?.data[i] ?? NaN;
        const want = differs.get(i) ?? w[i] ?? NaN;
        if (c.exact || c.outType ? gotBits[i] !== wantBits[i] : !sameValue(g, want)) bad.push(`[${i}] sim ${g} (${hex(gotBits[i])}) ort ${w[i]} (${hex(wantBits[i])})${differs.has(i) ? ` expected ${want}` : ''}`);
      }
      expect(bad, `${name}: ${bad.length}/${w.length} differ`).toEqual([]);
    } finally {
      await model.unload();
    }
  });
});
