/**
 * Plain-data descriptions of ONNX models and their protobuf encoding (onnx.proto, IR v8).
 *
 * Field numbers follow onnx/onnx.proto. Repeated scalars are written the way the reference
 * (proto2) serializer writes them: `TensorProto.dims`, `AttributeProto.ints/floats` unpacked;
 * `TensorProto.*_data` packed. Fields are emitted in field-number order, so equal inputs give
 * equal bytes.
 */
import { ProtoWriter } from './proto-writer.ts';

export const ONNX_DATA_TYPES = {
  float32: 1,
  uint8: 2,
  int8: 3,
  int32: 6,
  int64: 7,
  bool: 9,
  float16: 10,
  float64: 11,
} as const;
export type OnnxDataType = keyof typeof ONNX_DATA_TYPES;

/** A tensor dimension: a fixed size, or a named symbolic size (`dim_param`, e.g. "batch"). */
export type Dim = number | string;

export interface ValueInfo {
  name: string;
  dtype: OnnxDataType;
  dims: readonly Dim[];
  docString?: string;
}

/** float16 values are their IEEE half bit patterns (Node 20 has no Float16Array). */
export type TensorValues = Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array | Int8Array | Uint16Array;

export interface TensorData {
  name: string;
  dtype: OnnxDataType;
  dims: readonly number[];
  values: TensorValues;
  /**
   * `raw` (default) stores little-endian bytes in raw_data; `typed` stores float_data /
   * int32_data / int64_data / double_data, the other layout a reader must accept.
   */
  encoding?: 'raw' | 'typed';
}

export type AttributeValue =
  | { type: 'float'; value: number }
  | { type: 'int'; value: number | bigint }
  | { type: 'string'; value: string }
  | { type: 'tensor'; value: TensorData }
  | { type: 'floats'; value: readonly number[] }
  | { type: 'ints'; value: readonly (number | bigint)[] }
  | { type: 'strings'; value: readonly string[] };

/** Constructors for attribute values (a JS number alone cannot say whether it is INT or FLOAT). */
export const attr = {
  f: (value: number): AttributeValue => ({ type: 'float', value }),
  i: (value: number | bigint): AttributeValue => ({ type: 'int', value }),
  s: (value: string): AttributeValue => ({ type: 'string', value }),
  t: (value: TensorData): AttributeValue => ({ type: 'tensor', value }),
  floats: (value: readonly number[]): AttributeValue => ({ type: 'floats', value }),
  ints: (value: readonly (number | bigint)[]): AttributeValue => ({ type: 'ints', value }),
  strings: (value: readonly string[]): AttributeValue => ({ type: 'strings', value }),
};

export interface NodeDef {
  opType: string;
  inputs: readonly string[];
  outputs: readonly string[];
  name?: string;
  domain?: string;
  /** Written in insertion order. */
  attributes?: Readonly<Record<string, AttributeValue>>;
}

export interface GraphDef {
  name: string;
  nodes: readonly NodeDef[];
  inputs: readonly ValueInfo[];
  outputs: readonly ValueInfo[];
  initializers?: readonly TensorData[];
  valueInfo?: readonly ValueInfo[];
  docString?: string;
}

export interface ModelDef {
  graph: GraphDef;
  /** Default 8 (the IR version of opset 17). */
  irVersion?: number;
  /** Default `[{ domain: '', version: 17 }]`. */
  opsetImports?: readonly { domain: string; version: number }[];
  producerName?: string;
  producerVersion?: string;
  modelVersion?: number;
  docString?: string;
  metadata?: Readonly<Record<string, string>>;
}

// AttributeProto.AttributeType
const ATTR_TYPE = { float: 1, int: 2, string: 3, tensor: 4, floats: 6, ints: 7, strings: 8 } as const;

export function elementCount(dims: readonly number[]): number {
  return dims.reduce((a, b) => a * b, 1);
}

function checkTensor(t: TensorData): void {
  const expected = elementCount(t.dims);
  if (t.dims.some((d) => !Number.isInteger(d) || d < 0)) throw new RangeError(`tensor ${t.name}: bad dims [${t.dims}]`);
  if (t.values.length !== expected) {
    throw new RangeError(`tensor ${t.name}: dims [${t.dims}] need ${expected} values, got ${t.values.length}`);
  }
  const ok =
    (t.dtype === 'float32' && t.values instanceof Float32Array) ||
    (t.dtype === 'float64' && t.values instanceof Float64Array) ||
    (t.dtype === 'int32' && t.values instanceof Int32Array) ||
    (t.dtype === 'int64' && t.values instanceof BigInt64Array) ||
    ((t.dtype === 'uint8' || t.dtype === 'bool') && t.values instanceof Uint8Array) ||
    (t.dtype === 'int8' && t.values instanceof Int8Array) ||
    (t.dtype === 'float16' && t.values instanceof Uint16Array);
  if (!ok) throw new TypeError(`tensor ${t.name}: ${t.values.constructor.name} does not hold ${t.dtype}`);
}

/** Little-endian bytes of a typed array, independent of the host's byte order. */
export function littleEndianBytes(values: TensorValues): Uint8Array {
  const size = values.BYTES_PER_ELEMENT;
  const out = new Uint8Array(values.length * size);
  if (size === 1) {
    out.set(new Uint8Array(values.buffer, values.byteOffset, values.length));
    return out;
  }
  const view = new DataView(out.buffer);
  for (let i = 0; i < values.length; i++) {
    const off = i * size;
    if (values instanceof Float32Array) view.setFloat32(off, values[i] ?? 0, true);
    else if (values instanceof Float64Array) view.setFloat64(off, values[i] ?? 0, true);
    else if (values instanceof Int32Array) view.setInt32(off, values[i] ?? 0, true);
    else if (values instanceof BigInt64Array) view.setBigInt64(off, values[i] ?? 0n, true);
    else if (values instanceof Uint16Array) view.setUint16(off, values[i] ?? 0, true);
  }
  return out;
}

function writeTensor(w: ProtoWriter, t: TensorData): void {
  checkTensor(t);
  for (const d of t.dims) w.int(1, d);
  w.int(2, ONNX_DATA_TYPES[t.dtype]);
  const v = t.values;
  const typed = t.encoding === 'typed';
  if (typed) {
    if (v instanceof Float32Array) w.packedFloats(4, Array.from(v));
    else if (v instanceof BigInt64Array) w.packedInts(7, Array.from(v));
    // int32, int8, uint8, bool and float16 (its bit patterns) all live in int32_data.
    else if (!(v instanceof Float64Array)) w.packedInts(5, Array.from(v));
  }
  w.string(8, t.name);
  if (!typed) w.bytes(9, littleEndianBytes(v));
  else if (v instanceof Float64Array) w.bytes(10, littleEndianBytes(v));
}

function writeAttribute(w: ProtoWriter, name: string, a: AttributeValue): void {
  w.string(1, name);
  switch (a.type) {
    case 'float':
      w.float(2, a.value);
      break;
    case 'int':
      w.int(3, a.value);
      break;
    case 'string':
      w.string(4, a.value);
      break;
    case 'tensor':
      w.message(5, (m) => writeTensor(m, a.value));
      break;
    case 'floats':
      for (const x of a.value) w.float(7, x);
      break;
    case 'ints':
      for (const x of a.value) w.int(8, x);
      break;
    case 'strings':
      for (const x of a.value) w.string(9, x);
      break;
  }
  w.int(20, ATTR_TYPE[a.type]);
}

function writeNode(w: ProtoWriter, n: NodeDef): void {
  for (const i of n.inputs) w.string(1, i);
  for (const o of n.outputs) w.string(2, o);
  if (n.name !== undefined) w.string(3, n.name);
  w.string(4, n.opType);
  for (const [name, value] of Object.entries(n.attributes ?? {})) w.message(5, (m) => writeAttribute(m, name, value));
  if (n.domain !== undefined) w.string(7, n.domain);
}

function writeValueInfo(w: ProtoWriter, v: ValueInfo): void {
  w.string(1, v.name);
  // TypeProto { tensor_type = 1: Tensor { elem_type = 1, shape = 2: TensorShapeProto { dim = 1 } } }
  w.message(2, (type) =>
    type.message(1, (tensor) => {
      tensor.int(1, ONNX_DATA_TYPES[v.dtype]);
      tensor.message(2, (shape) => {
        for (const d of v.dims) {
          shape.message(1, (dim) => {
            if (typeof d === 'number') {
              if (!Number.isInteger(d) || d < 0) throw new RangeError(`value ${v.name}: bad dim ${d}`);
              dim.int(1, d);
            } else dim.string(2, d);
          });
        }
      });
    }),
  );
  if (v.docString !== undefined) w.string(3, v.docString);
}

function writeGraph(w: ProtoWriter, g: GraphDef): void {
  for (const n of g.nodes) w.message(1, (m) => writeNode(m, n));
  w.string(2, g.name);
  for (const t of g.initializers ?? []) w.message(5, (m) => writeTensor(m, t));
  if (g.docString !== undefined) w.string(10, g.docString);
  for (const v of g.inputs) w.message(11, (m) => writeValueInfo(m, v));
  for (const v of g.outputs) w.message(12, (m) => writeValueInfo(m, v));
  for (const v of g.valueInfo ?? []) w.message(13, (m) => writeValueInfo(m, v));
}

/** Serializes a model to ONNX protobuf bytes. */
export function encodeModel(model: ModelDef): Uint8Array {
  const w = new ProtoWriter();
  w.int(1, model.irVersion ?? 8);
  w.string(2, model.producerName ?? 'npu-fleet');
  if (model.producerVersion !== undefined) w.string(3, model.producerVersion);
  if (model.modelVersion !== undefined) w.int(5, model.modelVersion);
  if (model.docString !== undefined) w.string(6, model.docString);
  w.message(7, (m) => writeGraph(m, model.graph));
  for (const op of model.opsetImports ?? [{ domain: '', version: 17 }]) {
    w.message(8, (m) => {
      m.string(1, op.domain);
      m.int(2, op.version);
    });
  }
  for (const [key, value] of Object.entries(model.metadata ?? {})) {
    w.message(14, (m) => {
      m.string(1, key);
      m.string(2, value);
    });
  }
  return w.finish();
}
