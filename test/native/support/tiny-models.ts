/**
 * Tiny ONNX models for the binding tests, encoded with the repo's own ONNX writer (scripts/onnx)
 * and written to a temp directory. Small on purpose: these tests measure the binding, not kernels.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { attr, encodeModel, type GraphDef } from '../../../scripts/onnx/onnx-model.ts';
import { f32 } from '../../../scripts/onnx/tensors.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const dir = tempDir('npu-fleet-native-');

function write(name: string, graph: GraphDef): string {
  const path = join(dir, `${name}.onnx`);
  writeFileSync(path, encodeModel({ graph, irVersion: 8, opsetImports: [{ domain: '', version: 17 }] }));
  return path;
}

/** y = x * 2 + 1 over [batch, width] float32. */
export function affineModel(width = 4): string {
  return write(`affine-${width}`, {
    name: 'affine',
    nodes: [
      { opType: 'Mul', inputs: ['x', 'two'], outputs: ['x2'] },
      { opType: 'Add', inputs: ['x2', 'one'], outputs: ['y'] },
    ],
    inputs: [{ name: 'x', dtype: 'float32', dims: ['batch', width] }],
    outputs: [{ name: 'y', dtype: 'float32', dims: ['batch', width] }],
    initializers: [f32('two', [1], [2]), f32('one', [1], [1])],
  });
}

/** Range-dynamic: y[b] = mean(x[b, :]) over [batch, len] float32 (len varies per execution). */
export function rowMeanModel(): string {
  return write('row-mean', {
    name: 'row-mean',
    nodes: [{ opType: 'ReduceMean', inputs: ['x'], outputs: ['y'], attributes: { axes: attr.ints([1]), keepdims: attr.i(0) } }],
    inputs: [{ name: 'x', dtype: 'float32', dims: ['batch', 'len'] }],
    outputs: [{ name: 'y', dtype: 'float32', dims: ['batch'] }],
  });
}

/** Range-dynamic with a dynamic non-batch output dimension: y = x * 2 + 1 over [batch, len]. */
export function affineRangeModel(): string {
  return write('affine-range', {
    name: 'affine-range',
    nodes: [
      { opType: 'Mul', inputs: ['x', 'two'], outputs: ['x2'] },
      { opType: 'Add', inputs: ['x2', 'one'], outputs: ['y'] },
    ],
    inputs: [{ name: 'x', dtype: 'float32', dims: ['batch', 'len'] }],
    outputs: [{ name: 'y', dtype: 'float32', dims: ['batch', 'len'] }],
    initializers: [f32('two', [1], [2]), f32('one', [1], [1])],
  });
}

/** The expected output of affineModel for `x`. */
export function affine(x: Float32Array): Float32Array {
  return x.map((v) => v * 2 + 1);
}

/** Bytes that are not an ONNX model at all, and a valid model cut in half. */
export function brokenModels(): { garbage: string; truncated: string; empty: string } {
  const garbage = join(dir, 'garbage.onnx');
  writeFileSync(garbage, Buffer.from('this is not a protobuf \u0000\u00ff\u00fe'.repeat(20)));
  const full = encodeModel({
    graph: {
      name: 'affine',
      nodes: [{ opType: 'Add', inputs: ['x', 'one'], outputs: ['y'] }],
      inputs: [{ name: 'x', dtype: 'float32', dims: ['batch', 4] }],
      outputs: [{ name: 'y', dtype: 'float32', dims: ['batch', 4] }],
      initializers: [f32('one', [4], [1, 1, 1, 1])],
    },
  });
  const truncated = join(dir, 'truncated.onnx');
  writeFileSync(truncated, full.subarray(0, Math.floor(full.length / 2)));
  const empty = join(dir, 'empty.onnx');
  writeFileSync(empty, new Uint8Array(0));
  return { garbage, truncated, empty };
}

/** A model using an op the simulator does not implement. */
export function unsupportedOpModel(): string {
  return write('unsupported', {
    name: 'unsupported',
    nodes: [{ opType: 'NonMaxSuppression', inputs: ['x'], outputs: ['y'] }],
    inputs: [{ name: 'x', dtype: 'float32', dims: ['batch', 4] }],
    outputs: [{ name: 'y', dtype: 'float32', dims: ['batch', 4] }],
  });
}

export function f32Bytes(values: Float32Array): Uint8Array {
  return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
}

export function asF32(data: Uint8Array): Float32Array {
  const copy = new Uint8Array(data.byteLength);
  copy.set(data);
  return new Float32Array(copy.buffer);
}

export function ramp(n: number, offset = 0): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => (i + offset) * 0.5 - 3);
}

export const EXAMPLE_MLP = join(import.meta.dirname, '..', '..', '..', 'examples', 'models', 'mlp-classifier', '1', 'model.onnx');
