/**
 * Every misuse and failure the issue lists ends in a typed FleetError (code + details), never a
 * crash: malformed/truncated ONNX, unsupported op, wrong input sizes/dims/gears, unknown device,
 * double close, execute after close/unload.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';

import { FleetError } from '../../src/errors/fleet-error.ts';
import { backendInfo, openDevice, type Device, type LoadedModel } from '../../src/device/index.ts';
import { loadAddon } from '../../src/device/native-addon.ts';
import { toFleetError } from '../../src/device/native-error.ts';
import { affineModel, brokenModels, f32Bytes, ramp, unsupportedOpModel } from './support/tiny-models.ts';

async function rejection(p: Promise<unknown>): Promise<FleetError> {
  const error = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(FleetError);
  return error as FleetError;
}

describe('native binding errors', () => {
  let device: Device;
  let model: LoadedModel;
  beforeAll(async () => {
    device = await openDevice(0);
    model = await device.loadModel(affineModel(4), { gears: [1, 4] });
  });
  afterAll(async () => {
    if (!device.closed) await device.close();
  });

  it('rejects malformed, truncated and empty ONNX files with MODEL_LOAD_FAILED and the ACL error', async () => {
    const { garbage, truncated, empty } = brokenModels();
    for (const path of [garbage, truncated, empty]) {
      const e = await rejection(device.loadModel(path, { gears: [1] }));
      expect(e.code).toBe('MODEL_LOAD_FAILED');
      expect(e.details['aclError']).toEqual(expect.any(Number));
      expect(e.details['aclCode']).toMatch(/^ACL_ERROR_/);
      expect(e.details['api']).toBe('aclmdlLoadFromFile');
    }
    const missing = await rejection(device.loadModel('/nonexistent/model.onnx', { gears: [1] }));
    expect(missing.code).toBe('MODEL_LOAD_FAILED');
  });

  it('names an unsupported operator at load time', async () => {
    const e = await rejection(device.loadModel(unsupportedOpModel(), { gears: [1] }));
    expect(['UNSUPPORTED_OP', 'MODEL_LOAD_FAILED']).toContain(e.code);
    expect(`${e.message} ${String(e.details['aclMessage'])}`).toMatch(/NonMaxSuppression/);
  });

  it('rejects inputs whose size, rank, dims, count or gear do not fit the model', async () => {
    const ok = f32Bytes(ramp(4 * 4));
    const cases: Array<[Array<{ data: Uint8Array; dims: number[] }>, number]> = [
      [[{ data: ok.subarray(0, 60), dims: [4, 4] }], 4], // too few bytes
      [[{ data: new Uint8Array(68), dims: [4, 4] }], 4], // too many bytes
      [[{ data: ok, dims: [16] }], 4], // rank
      [[{ data: ok, dims: [4, 4] }], 2], // gear not in gears
      [[{ data: ok, dims: [4, 4] }], 1], // batch dim != gear
      [[{ data: ok, dims: [2, 8] }], 2],
      [[], 4], // input count
      [[{ data: ok, dims: [4, 4] }, { data: ok, dims: [4, 4] }], 4],
    ];
    for (const [inputs, gear] of cases) {
      const e = await rejection(model.execute(inputs, gear));
      expect(e.code).toBe('INVALID_ARGUMENT');
    }
    // The model still works afterwards.
    const r = await model.execute([{ data: ok, dims: [4, 4] }], 4);
    expect(r.outputs[0]?.dims).toEqual([4, 4]);
  });

  it('rejects an unknown device id', async () => {
    const { deviceCount } = backendInfo();
    for (const id of [deviceCount, -1, 1.5, 10_000]) {
      const e = await rejection(openDevice(id));
      expect(e.code).toBe('INVALID_ARGUMENT');
    }
  });

  it('turns an ACL failure to open a device into a typed error when TS checks are bypassed', async () => {
    const raw = await loadAddon()
      .openDevice(backendInfo().deviceCount + 5)
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(raw).toMatchObject({ kind: 'acl', aclError: expect.any(Number), aclCode: expect.stringMatching(/^ACL_ERROR_/), api: 'aclrtSetDevice' });
    expect(toFleetError(raw, 'openDevice').code).toBe('INVALID_ARGUMENT');
  });

  it('rejects bad load options before they reach C++', async () => {
    expect((await rejection(device.loadModel(affineModel(4), { gears: [0] }))).code).toBe('INVALID_ARGUMENT');
    expect((await rejection(device.loadModel(affineModel(4), { slots: 3 as 2 }))).code).toBe('INVALID_ARGUMENT');
    expect((await rejection(device.loadModel(affineModel(4), { gears: [1], maxInputDims: { nope: [1, 4] } }))).code).toBe('INVALID_ARGUMENT');
  });

  it('refuses execute after unload and a double unload with CLOSED', async () => {
    const m = await device.loadModel(affineModel(4), { gears: [1] });
    await m.unload();
    expect((await rejection(m.execute([{ data: f32Bytes(ramp(4)), dims: [1, 4] }], 1))).code).toBe('CLOSED');
    expect((await rejection(m.unload())).code).toBe('CLOSED');
  });

  it('refuses execute after close, loadModel after close and a double close with CLOSED', async () => {
    const d = await openDevice(1);
    const m = await d.loadModel(affineModel(4), { gears: [1] });
    await d.close();
    expect((await rejection(m.execute([{ data: f32Bytes(ramp(4)), dims: [1, 4] }], 1))).code).toBe('CLOSED');
    expect((await rejection(d.loadModel(affineModel(4)))).code).toBe('CLOSED');
    expect((await rejection(d.memInfo())).code).toBe('CLOSED');
    expect((await rejection(d.close())).code).toBe('CLOSED');
  });
});
