/**
 * The simulator's ONNX reader against damaged files: every truncation point class and random byte
 * flips of a real model must end in a model that loads (and then runs or fails cleanly) or in a
 * typed FleetError — never a crash, a hang or an untyped error.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_MODELS_DIR } from '../../../scripts/gen-models.ts';
import { Prng } from '../../../scripts/onnx/prng.ts';
import { openDevice, type Device } from '../../../src/device/index.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';

const original = readFileSync(join(DEFAULT_MODELS_DIR, 'small-cnn', '1', 'model.onnx'));
const dir = mkdtempSync(join(tmpdir(), 'onnx-corrupt-'));
let device: Device;

beforeAll(async () => {
  device = await openDevice(0);
});
afterAll(async () => {
  await device?.close();
  rmSync(dir, { recursive: true, force: true });
});

type Outcome = 'loaded' | 'rejected';

async function tryLoad(bytes: Uint8Array, tag: string): Promise<Outcome> {
  const path = join(dir, `${tag}.onnx`);
  writeFileSync(path, bytes);
  let model;
  try {
    model = await device.loadModel(path, { gears: [1, 2] });
  } catch (error) {
    expect(error, tag).toBeInstanceOf(FleetError);
    expect(['MODEL_LOAD_FAILED', 'UNSUPPORTED_OP', 'DEVICE_OUT_OF_MEMORY', 'INVALID_ARGUMENT'], tag).toContain((error as FleetError).code);
    return 'rejected';
  }
  try {
    const input = model.inputs[0];
    if (input?.dtype === 'float32' && input.dims.every((d, i) => d > 0 || i === 0)) {
      const dims = input.dims.map((d, i) => (i === 0 ? 1 : d));
      const bytesNeeded = dims.reduce((a, b) => a * b, 4);
      await model.execute([{ data: new Uint8Array(bytesNeeded), dims }], 1).catch((error: unknown) => {
        expect(error, tag).toBeInstanceOf(FleetError);
      });
    }
  } finally {
    await model.unload();
  }
  return 'loaded';
}

describe('damaged ONNX files', () => {
  it('rejects every truncation inside the graph with a typed error', async () => {
    // The generator writes the graph (field 7) then opset_import (field 8, 6 bytes) last.
    const graphEnd = original.length - 6;
    expect(original.subarray(graphEnd).toString('hex')).toBe('42040a001011');
    const step = Math.max(1, Math.floor(graphEnd / 97));
    const outcomes: Outcome[] = [];
    for (let len = 0; len < graphEnd; len += step) outcomes.push(await tryLoad(original.subarray(0, len), `trunc-${len}`));
    // Each prefix lacks part of the graph (nodes, weights, outputs): none may load.
    expect(outcomes.filter((o) => o === 'loaded')).toEqual([]);
  });

  it('survives random byte flips', async () => {
    const rng = new Prng(0xf11b);
    let rejected = 0;
    for (let k = 0; k < 150; k++) {
      const bytes = Uint8Array.from(original);
      const flips = rng.int(1, 4);
      for (let f = 0; f < flips; f++) bytes[rng.int(0, bytes.length)] = rng.int(0, 256);
      if ((await tryLoad(bytes, `flip-${k}`)) === 'rejected') rejected++;
    }
    // Most flips land in weight bytes and leave a valid model; some must break the structure.
    expect(rejected).toBeGreaterThan(0);
  });
});
