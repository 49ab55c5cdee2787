/**
 * Every supported simulator op, as a single-op model, run through the binding on the simulator
 * and on onnxruntime at batch 1 and at the largest gear; outputs must match within the tolerance
 * documented in differential.ts.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Prng } from '../../../scripts/onnx/prng.ts';
import { compare, concreteDims, describeComparison, randomInput, runOrt } from './differential.ts';
import { encodeCase, OP_CASES, OP_GEARS } from './op-cases.ts';
import { openSimDevice, type SimDeviceHandle } from './sim-runner.ts';

const dir = mkdtempSync(join(tmpdir(), 'sim-ops-'));
let device: SimDeviceHandle;
/** Worst tolerance ratio seen per case, printed once so the margin is visible in the test log. */
const margins: [string, number][] = [];

beforeAll(async () => {
  device = await openSimDevice(0);
});
afterAll(async () => {
  margins.sort((a, b) => b[1] - a[1]);
  console.log(`sim vs onnxruntime, largest |err|/tolerance: ${margins.slice(0, 5).map(([n, r]) => `${n} ${r.toFixed(3)}`).join(', ')}`);
  await device?.close();
  rmSync(dir, { recursive: true, force: true });
});

const largestGear = Math.max(...OP_GEARS);

describe('simulator ops vs onnxruntime', () => {
  it.each(OP_CASES.map((c) => [c.name, c] as const))('%s', async (name, c) => {
    const path = join(dir, name.replace(/\W/g, '_'), 'model.onnx');
    mkdirSync(join(path, '..'), { recursive: true });
    writeFileSync(path, encodeCase(c));
    const maxInputDims = Object.fromEntries(c.graph.inputs.map((i) => [i.name, concreteDims(i.dims, largestGear)]));
    const model = await device.load(path, OP_GEARS, maxInputDims);
    try {
      for (const batch of [1, largestGear]) {
        const rng = new Prng(0x5eed + batch);
        const inputs = c.graph.inputs.map((i) => randomInput(rng, i, concreteDims(i.dims, batch), c.ranges?.[i.name]));
        const expected = await runOrt(path, inputs);
        const got = await model.run(inputs, batch);
        expect(got.length).toBe(c.graph.outputs.length);
        c.graph.outputs.forEach((o, k) => {
          const want = expected.get(o.name);
          const have = got[k];
          expect(have?.dims, `${name} batch ${batch} ${o.name} dims`).toEqual(want?.dims);
          const cmp = compare(have?.data ?? [], want?.data ?? []);
          margins.push([`${name}@${batch}`, cmp.worst?.ratio ?? 0]);
          expect(cmp.failures, `${name} batch ${batch} ${o.name}: ${describeComparison(cmp)}`).toBe(0);
        });
      }
    } finally {
      await model.unload();
    }
  });
});
