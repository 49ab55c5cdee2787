/** Shorthands for initializer tensors. */
import type { Prng } from './prng.ts';
import { elementCount, type TensorData } from './onnx-model.ts';

export function f32(name: string, dims: readonly number[], values: Float32Array | readonly number[]): TensorData {
  return { name, dtype: 'float32', dims, values: values instanceof Float32Array ? values : Float32Array.from(values) };
}

export function i64(name: string, dims: readonly number[], values: readonly (number | bigint)[]): TensorData {
  return { name, dtype: 'int64', dims, values: BigInt64Array.from(values, (v) => BigInt(v)) };
}

/**
 * Weights uniform in ±sqrt(6 / fanIn) (He/Kaiming-uniform): activations keep their scale through
 * ReLU layers, so outputs are neither saturated nor vanishing.
 */
export function heUniform(rng: Prng, name: string, dims: readonly number[], fanIn: number): TensorData {
  const bound = Math.sqrt(6 / fanIn);
  return f32(name, dims, rng.float32Array(elementCount(dims), -bound, bound));
}

export function uniform(rng: Prng, name: string, dims: readonly number[], low: number, high: number): TensorData {
  return f32(name, dims, rng.float32Array(elementCount(dims), low, high));
}
