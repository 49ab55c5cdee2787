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
import { runOrt, type HostTensor } from './differential.ts';
import { openSimDevice, type SimDeviceHandle } from './sim-runner.ts';

interface EdgeCase {
  name: string;
  op: string;
  /** Graph inputs x0, x1, ... (float32, static shapes). */
  inputs: { dims: number[]; data: number[] }[];
  initializers?: TensorData[];
  attributes?: Record<string, AttributeValue>;
  opset?: number;
}

/** NaN, both infinities, signed zero and ordinary values, repeated to fill a tensor. */
const SPECIALS = [NaN, Infinity, -Infinity, 1, -2, 0.5, -0, 3];
const specials = (n: number): number[] => Array.from({ length: n }, (_, i) => SPECIALS[i % SPECIALS.length] ?? 0);

const CASES: EdgeCase[] = [
  // Relu(NaN) is NaN in onnxruntime (and in max(x, 0) with NaN propagation); a `x > 0 ? x : 0`
  // kernel turns it into 0 and hides a poisoned activation.
  { name: 'Relu/nan-inf', op: 'Relu', inputs: [{ dims: [2, 8], data: specials(16) }] },
  { name: 'LeakyRelu/nan-inf', op: 'LeakyRelu', inputs: [{ dims: [2, 8], data: specials(16) }], attributes: { alpha: attr.f(0.2) } },
  // A row holding +Inf, or only -Inf, is NaN throughout in onnxruntime.
  { name: 'Softmax/inf-rows', op: 'Softmax', inputs: [{ dims: [3, 4], data: [Infinity, 0, 1, 2, -Infinity, -Infinity, -Infinity, -Infinity, NaN, 1, 2, 3] }], opset: 13 },
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
    nodes: [{ opType: c.op, name: 'n', inputs: [...inputs.map((i) => i.name), ...initializers.map((t) => t.name)], outputs: ['y'], attributes: c.attributes ?? {} }],
    inputs,
    outputs: [{ name: 'y', dtype: 'float32', dims: outDims }],
    initializers,
  };
}

function encode(c: EdgeCase, outDims: number[]): Uint8Array {
  const opset = c.opset ?? 17;
  return encodeModel({ graph: graphOf(c, outDims), irVersion: opset >= 13 ? 8 : 7, opsetImports: [{ domain: '', version: opset }] });
}

/** Same value, NaN for NaN, same infinity; finite values within 1e-5 relative (1e-6 absolute). */
function sameValue(got: number, want: number): boolean {
  if (Number.isNaN(want) || !Number.isFinite(want)) return Object.is(got, want) || (Number.isNaN(got) && Number.isNaN(want));
  return Math.abs(got - want) <= 1e-5 * Math.abs(want) + 1e-6;
}

describe('simulator edge values vs onnxruntime', () => {
  it.each(CASES.map((c) => [c.name, c] as const))('%s', async (name, c) => {
    const inputs: HostTensor[] = c.inputs.map((t, i) => ({ name: `x${i}`, dtype: 'float32', dims: t.dims, data: Float32Array.from(t.data) }));
    // The output shape comes from onnxruntime, then both run a fully static model.
    const probe = await runOrt(encode(c, []), inputs);
    const outDims = probe.get('y')?.dims ?? [];
    const path = join(dir, `${name.replace(/\W/g, '_')}.onnx`);
    writeFileSync(path, encode(c, outDims));
    const want = (await runOrt(path, inputs)).get('y');
    const model = await device.load(path, [], {});
    try {
      // A static model's "gear" is its leading input dim.
      const [got] = await model.run(inputs, c.inputs[0]?.dims[0] ?? 1);
      expect(got?.dims).toEqual(want?.dims);
      const bad: string[] = [];
      const w = want?.data ?? new Float32Array();
      for (let i = 0; i < w.length; i++) {
        const g = got?.data[i] ?? NaN;
        if (!sameValue(g, w[i] ?? NaN)) bad.push(`[${i}] sim ${g} ort ${w[i]}`);
      }
      expect(bad, `${name}: ${bad.length}/${w.length} differ`).toEqual([]);
    } finally {
      await model.unload();
    }
  });
});
