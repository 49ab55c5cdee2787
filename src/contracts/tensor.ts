import { z } from 'zod';

/** Wire dtypes (DESIGN §2). Order is part of no format: the codec writes names, not indices. */
export const DTYPES = ['float32', 'float16', 'int8', 'uint8', 'int32', 'int64', 'bool'] as const;
export const DtypeSchema = z.enum(DTYPES).describe('Element type of a tensor: one of ' + DTYPES.join(', '));
export type Dtype = z.infer<typeof DtypeSchema>;

export const DTYPE_BYTES: Readonly<Record<Dtype, number>> = {
  float32: 4,
  float16: 2,
  int8: 1,
  uint8: 1,
  int32: 4,
  int64: 8,
  bool: 1,
};

export const MAX_TENSOR_RANK = 8;

export const TensorNameSchema = z
  .string()
  .min(1, 'tensor name must not be empty')
  .max(128, 'tensor name must be at most 128 characters')
  .describe('Input/output name as the model declares it');

export const ShapeSchema = z
  .array(z.number().int('dimensions must be integers').nonnegative('dimensions must be >= 0'))
  .min(1, 'shape needs at least the leading batch dimension')
  .max(MAX_TENSOR_RANK, `shape rank must be at most ${MAX_TENSOR_RANK}`)
  .describe('Dimensions; shape[0] is the number of samples in this request');

/** Tensor metadata shared by every representation (in memory, binary header, JSON wire). */
export const TensorMetaSchema = z.object({
  name: TensorNameSchema,
  dtype: DtypeSchema,
  shape: ShapeSchema,
});
export type TensorMeta = z.infer<typeof TensorMetaSchema>;

/** In-memory tensor: raw little-endian bytes, usually a view into the received message. */
export const TensorSchema = TensorMetaSchema.extend({
  data: z
    .custom<Uint8Array>((v) => v instanceof Uint8Array, 'data must be a Uint8Array/Buffer of raw bytes')
    .describe('Raw little-endian element bytes (length = product(shape) x dtype size)'),
});
export type Tensor = z.infer<typeof TensorSchema>;

/** Element count of a shape, or undefined when it is not a safe integer (hostile input). */
export function elementCount(shape: readonly number[]): number | undefined {
  let n = 1;
  for (const d of shape) {
    n *= d;
    if (!Number.isSafeInteger(n)) return undefined;
  }
  return n;
}

export function expectedByteLength(dtype: Dtype, shape: readonly number[]): number | undefined {
  const n = elementCount(shape);
  if (n === undefined) return undefined;
  const bytes = n * DTYPE_BYTES[dtype];
  return Number.isSafeInteger(bytes) ? bytes : undefined;
}

type TypedArrayFor<D extends Dtype> = D extends 'float32'
  ? Float32Array
  : D extends 'int32'
    ? Int32Array
    : D extends 'int64'
      ? BigInt64Array
      : D extends 'int8'
        ? Int8Array
        : D extends 'float16'
          ? Uint16Array
          : Uint8Array;

/**
 * A typed-array view of a tensor's bytes. Zero-copy when the bytes are aligned for the element
 * size (the binary codec aligns tensor data to 8 bytes within the frame); otherwise one copy.
 * float16 is exposed as its raw uint16 bit patterns.
 */
export function tensorView<D extends Dtype>(dtype: D, data: Uint8Array): TypedArrayFor<D> {
  const size = DTYPE_BYTES[dtype];
  // new Uint8Array(data), not data.slice(): on a Buffer (what Kafka delivers) slice() is a view at
  // the same unaligned offset, and the typed array constructor below throws a RangeError.
  const src = data.byteOffset % size === 0 ? data : new Uint8Array(data);
  const length = src.byteLength / size;
  const ctor: new (buffer: ArrayBufferLike, byteOffset: number, length: number) => ArrayBufferView = {
    float32: Float32Array,
    float16: Uint16Array,
    int8: Int8Array,
    uint8: Uint8Array,
    int32: Int32Array,
    int64: BigInt64Array,
    bool: Uint8Array,
  }[dtype] as never;
  return new ctor(src.buffer, src.byteOffset, length) as TypedArrayFor<D>;
}

/** Wraps a typed array as tensor bytes without copying. */
export function bytesOf(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}
