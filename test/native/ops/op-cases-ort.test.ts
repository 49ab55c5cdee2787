/**
 * Sanity of the oracle side: every single-op model the writer produces loads in onnxruntime,
 * runs at batch 1 and at the largest gear, and yields the declared output shape. A case that fails
 * here is a bad test case, not a simulator bug.
 */
import { describe, expect, it } from 'vitest';
import { Prng } from '../../../scripts/onnx/prng.ts';
import { concreteDims, randomInput, runOrt } from './differential.ts';
import { encodeCase, OP_CASES, OP_GEARS, SUPPORTED_OPS } from './op-cases.ts';

describe('single-op cases on onnxruntime', () => {
  it('cover every operator the simulator supports, with unique names', () => {
    const used = new Set(OP_CASES.flatMap((c) => c.graph.nodes.map((n) => n.opType)));
    expect(SUPPORTED_OPS.filter((op) => !used.has(op))).toEqual([]);
    expect([...used].filter((op) => !(SUPPORTED_OPS as readonly string[]).includes(op))).toEqual([]);
    expect(new Set(OP_CASES.map((c) => c.name)).size).toBe(OP_CASES.length);
  });

  it.each(OP_CASES.map((c) => [c.name, c] as const))('%s', async (_name, c) => {
    const bytes = encodeCase(c);
    for (const batch of [1, Math.max(...OP_GEARS)]) {
      const rng = new Prng(batch);
      const inputs = c.graph.inputs.map((i) => randomInput(rng, i, concreteDims(i.dims, batch), c.ranges?.[i.name]));
      const outputs = await runOrt(bytes, inputs);
      for (const o of c.graph.outputs) {
        const got = outputs.get(o.name);
        expect(got?.dims).toEqual(concreteDims(o.dims, batch));
        const data = Array.from(got?.data ?? []);
        expect(data.every(Number.isFinite)).toBe(true);
        expect(new Set(data).size > 1 || data.length === 1).toBe(true);
      }
    }
  });
});
