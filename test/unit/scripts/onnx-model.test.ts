import { describe, expect, it } from 'vitest';
import * as ort from 'onnxruntime-node';
import { attr, encodeModel, type GraphDef, type ModelDef } from '../../../scripts/onnx/onnx-model.ts';
import { f32 as f32Tensor, i64 } from '../../../scripts/onnx/tensors.ts';
import { f32, fields, one, sint64, str } from './proto-decoder.ts';

const graph: GraphDef = {
  name: 'g',
  nodes: [
    {
      opType: 'Gemm',
      name: 'gemm',
      inputs: ['x', 'w', 'b'],
      outputs: ['y'],
      attributes: { alpha: attr.f(0.5), transB: attr.i(1), axes: attr.ints([-1, 2]), mode: attr.s('x') },
    },
  ],
  inputs: [{ name: 'x', dtype: 'float32', dims: ['batch', 3] }],
  outputs: [{ name: 'y', dtype: 'float32', dims: ['batch', 2] }],
  initializers: [f32Tensor('w', [2, 3], [1, 2, 3, 4, 5, 6]), f32Tensor('b', [2], [0.5, -0.5])],
};

describe('encodeModel', () => {
  const bytes = encodeModel({ graph, producerName: 'p', modelVersion: 3, metadata: { k: 'v' } });

  it('writes ModelProto header fields and the default opset 17 import', () => {
    expect(sint64(one(bytes, 1))).toBe(8n); // ir_version
    expect(str(one(bytes, 2))).toBe('p');
    expect(sint64(one(bytes, 5))).toBe(3n);
    const opset = one(bytes, 8).bytes as Uint8Array;
    expect(str(one(opset, 1))).toBe('');
    expect(sint64(one(opset, 2))).toBe(17n);
    const meta = one(bytes, 14).bytes as Uint8Array;
    expect([str(one(meta, 1)), str(one(meta, 2))]).toEqual(['k', 'v']);
  });

  it('writes nodes with typed attributes (proto2 unpacked repeated ints)', () => {
    const g = one(bytes, 7).bytes as Uint8Array;
    expect(str(one(g, 2))).toBe('g');
    const node = one(g, 1).bytes as Uint8Array;
    expect(fields(node, 1).map(str)).toEqual(['x', 'w', 'b']);
    expect(str(one(node, 4))).toBe('Gemm');
    const attrs = fields(node, 5).map((a) => a.bytes as Uint8Array);
    expect(attrs.map((a) => str(one(a, 1)))).toEqual(['alpha', 'transB', 'axes', 'mode']);
    const [alpha, transB, axes, mode] = attrs as [Uint8Array, Uint8Array, Uint8Array, Uint8Array];
    expect([f32(one(alpha, 2)), sint64(one(alpha, 20))]).toEqual([0.5, 1n]);
    expect([sint64(one(transB, 3)), sint64(one(transB, 20))]).toEqual([1n, 2n]);
    expect(fields(axes, 8).map(sint64)).toEqual([-1n, 2n]);
    expect(sint64(one(axes, 20))).toBe(7n);
    expect([str(one(mode, 4)), sint64(one(mode, 20))]).toEqual(['x', 3n]);
  });

  it('writes initializers as raw little-endian data and value infos with dim_param', () => {
    const g = one(bytes, 7).bytes as Uint8Array;
    const w = fields(g, 5)[0]?.bytes as Uint8Array;
    expect(fields(w, 1).map(sint64)).toEqual([2n, 3n]);
    expect(sint64(one(w, 2))).toBe(1n);
    expect(str(one(w, 8))).toBe('w');
    const raw = one(w, 9).bytes as Uint8Array;
    expect(Array.from(new Float32Array(raw.slice().buffer))).toEqual([1, 2, 3, 4, 5, 6]);
    const input = one(g, 11).bytes as Uint8Array;
    const tensorType = one(one(one(input, 2).bytes as Uint8Array, 1).bytes as Uint8Array, 2).bytes as Uint8Array;
    const dims = fields(tensorType, 1).map((d) => d.bytes as Uint8Array);
    expect(str(one(dims[0] as Uint8Array, 2))).toBe('batch');
    expect(sint64(one(dims[1] as Uint8Array, 1))).toBe(3n);
  });

  it('is deterministic', () => {
    expect(Buffer.from(encodeModel({ graph, producerName: 'p', modelVersion: 3, metadata: { k: 'v' } }))).toEqual(
      Buffer.from(bytes),
    );
  });

  it('produces models onnxruntime loads and runs; raw and typed initializer layouts agree', async () => {
    // The structural graph above carries attributes Gemm does not know; keep only real ones.
    const gemm = { ...graph.nodes[0], attributes: { alpha: attr.f(0.5), transB: attr.i(1) } } as GraphDef['nodes'][number];
    const runnable: GraphDef = { ...graph, nodes: [gemm] };
    const typed: ModelDef = {
      graph: { ...runnable, initializers: graph.initializers?.map((t) => ({ ...t, encoding: 'typed' as const })) },
    };
    const x = new ort.Tensor('float32', Float32Array.from([1, 0, -1, 2, 2, 2]), [2, 3]);
    const results: number[][] = [];
    for (const m of [encodeModel({ graph: runnable }), encodeModel(typed)]) {
      const session = await ort.InferenceSession.create(m);
      const out = await session.run({ x });
      results.push(Array.from(out.y?.data as Float32Array));
      await session.release();
    }
    // y = 0.5 * x @ w^T + b
    expect(results[0]).toEqual([-0.5, -1.5, 6.5, 14.5]);
    expect(results[1]).toEqual(results[0]);
  });

  it('encodes int64 tensors both ways (typed uses packed int64_data)', async () => {
    const table = f32Tensor('table', [4, 2], [0, 1, 10, 11, 20, 21, 30, 31]);
    for (const encoding of ['raw', 'typed'] as const) {
      const m = encodeModel({
        graph: {
          name: 'gather',
          nodes: [{ opType: 'Gather', inputs: ['table', 'idx'], outputs: ['y'], attributes: { axis: attr.i(0) } }],
          inputs: [{ name: 'x', dtype: 'float32', dims: [1] }],
          outputs: [{ name: 'y', dtype: 'float32', dims: [3, 2] }],
          initializers: [table, { ...i64('idx', [3], [3, -4, 1]), encoding }],
        },
      });
      const session = await ort.InferenceSession.create(m);
      const out = await session.run({ x: new ort.Tensor('float32', new Float32Array(1), [1]) });
      expect(Array.from(out.y?.data as Float32Array)).toEqual([30, 31, 0, 1, 10, 11]);
      await session.release();
    }
  });

  it('rejects tensors whose values do not match dims or dtype', () => {
    const bad = (t: GraphDef['initializers']) => () => encodeModel({ graph: { ...graph, initializers: t } });
    expect(bad([f32Tensor('w', [2, 2], [1, 2, 3])])).toThrow(/need 4 values/);
    expect(bad([{ name: 'w', dtype: 'int64', dims: [1], values: new Float32Array(1) }])).toThrow(/does not hold int64/);
    expect(bad([f32Tensor('w', [-1], [])])).toThrow(/bad dims/);
  });
});
