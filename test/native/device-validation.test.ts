/**
 * src/device checks arguments in TS before they reach C++, maps dtypes and native errors, and
 * fails to load the addon with one actionable error. No device needed.
 */
import { writeFileSync} from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { FleetError } from '../../src/errors/fleet-error.ts';
import { ACL_DTYPES, dtypeFromAcl, elementBytes } from '../../src/device/acl-dtype.ts';
import { addonCandidates, loadAddonFrom } from '../../src/device/native-addon.ts';
import { toFleetError } from '../../src/device/native-error.ts';
import { validateExecuteInputs, validateLoadOptions } from '../../src/device/validate.ts';
import { tempDir } from '../helpers/temp-dir.ts';

function thrown(fn: () => unknown): FleetError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(FleetError);
    return e as FleetError;
  }
  throw new Error('expected a throw');
}

const batchModel = {
  inputs: [
    { name: 'x', dtype: 'float32' as const, dims: [-1, 3] },
    { name: 'ids', dtype: 'int64' as const, dims: [-1, 2] },
  ],
  gears: [1, 4],
  dynamic: 'batch' as const,
  maxInputDims: [
    [4, 3],
    [4, 2],
  ],
};
const rangeModel = {
  inputs: [{ name: 'tokens', dtype: 'int64' as const, dims: [-1, -1] }],
  gears: [1, 2, 8],
  dynamic: 'range' as const,
  maxInputDims: [[8, 128]],
};

describe('device argument validation', () => {
  it('accepts a batch padded to a gear with exact byte lengths', () => {
    expect(() =>
      validateExecuteInputs(batchModel, [
        { data: new Uint8Array(4 * 3 * 4), dims: [4, 3] },
        { data: new Uint8Array(4 * 2 * 8), dims: [4, 2] },
      ], 4, 100),
    ).not.toThrow();
  });

  it('rejects byte lengths that disagree with dims × dtype size', () => {
    const e = thrown(() =>
      validateExecuteInputs(batchModel, [
        { data: new Uint8Array(4 * 3 * 4), dims: [4, 3] },
        { data: new Uint8Array(4 * 2 * 4), dims: [4, 2] }, // int64 needs 8 bytes each
      ], 4, undefined),
    );
    expect(e.code).toBe('INVALID_ARGUMENT');
    expect(e.details).toMatchObject({ input: 'ids', expectedBytes: 64, byteLength: 32 });
  });

  it('rejects gears outside the model, batch dims that differ from the gear, bad rank and fixed dims', () => {
    const ok = [{ data: new Uint8Array(48), dims: [4, 3] }, { data: new Uint8Array(64), dims: [4, 2] }];
    expect(thrown(() => validateExecuteInputs(batchModel, ok, 2, undefined)).message).toMatch(/gear 2/);
    expect(thrown(() => validateExecuteInputs(batchModel, ok, 1, undefined)).message).toMatch(/must equal the gear/);
    expect(thrown(() => validateExecuteInputs(batchModel, [{ data: new Uint8Array(48), dims: [4, 3, 1] }, ok[1]!], 4, undefined)).message).toMatch(/rank 2/);
    expect(thrown(() => validateExecuteInputs(batchModel, [{ data: new Uint8Array(64), dims: [4, 4] }, ok[1]!], 4, undefined)).message).toMatch(/dimension 1 must be 3/);
    expect(thrown(() => validateExecuteInputs(batchModel, [ok[0]!], 4, undefined)).message).toMatch(/takes 2 input/);
    expect(thrown(() => validateExecuteInputs(batchModel, ok, 4, -1)).message).toMatch(/timeoutMs/);
    expect(thrown(() => validateExecuteInputs(batchModel, [{ data: [1, 2] as unknown as Uint8Array, dims: [4, 3] }, ok[1]!], 4, undefined)).message).toMatch(/Uint8Array/);
  });

  it('bounds range-dynamic dims by maxInputDims', () => {
    expect(() => validateExecuteInputs(rangeModel, [{ data: new Uint8Array(2 * 100 * 8), dims: [2, 100] }], 2, undefined)).not.toThrow();
    expect(thrown(() => validateExecuteInputs(rangeModel, [{ data: new Uint8Array(2 * 129 * 8), dims: [2, 129] }], 2, undefined)).message).toMatch(/<= 128/);
  });

  it('normalises load options and rejects bad ones', () => {
    expect(validateLoadOptions('/m.onnx', { gears: [8, 1, 4, 4] })).toEqual({ gears: [1, 4, 8], maxInputDims: {}, maxOutputDims: {}, slots: 2 });
    expect(thrown(() => validateLoadOptions('', {})).code).toBe('INVALID_ARGUMENT');
    expect(thrown(() => validateLoadOptions('/m', { gears: [1.5] })).code).toBe('INVALID_ARGUMENT');
    expect(thrown(() => validateLoadOptions('/m', { maxInputDims: { x: [0, 4] } })).code).toBe('INVALID_ARGUMENT');
    expect(thrown(() => validateLoadOptions('/m', { gears: Array.from({ length: 129 }, (_, i) => i + 1) })).code).toBe('INVALID_ARGUMENT');
  });
});

describe('dtype mapping', () => {
  it('round-trips every wire dtype through its aclDataType', () => {
    for (const [name, { aclDataType }] of Object.entries(ACL_DTYPES)) expect(dtypeFromAcl(aclDataType, 't')).toBe(name);
    expect(elementBytes('int64')).toBe(8);
    expect(elementBytes('float16')).toBe(2);
    expect(thrown(() => dtypeFromAcl(11, 'd')).code).toBe('MODEL_LOAD_FAILED'); // ACL_DOUBLE
  });
});

describe('native error mapping', () => {
  const native = (props: Record<string, unknown>): Error => Object.assign(new Error('boom'), props);

  it('keeps aclError, its symbol and the recent error text', () => {
    const e = toFleetError(native({ kind: 'acl', aclError: 207001, aclCode: 'ACL_ERROR_RT_MEMORY_ALLOCATION', aclMessage: 'out of device memory', api: 'aclrtMalloc' }), 'loadModel');
    expect(e.code).toBe('DEVICE_OUT_OF_MEMORY');
    expect(e.retriable).toBe(true);
    expect(e.details).toMatchObject({ aclError: 207001, aclCode: 'ACL_ERROR_RT_MEMORY_ALLOCATION', aclMessage: 'out of device memory', api: 'aclrtMalloc' });
  });

  it('classifies load failures, unsupported ops, device faults and lifecycle errors', () => {
    expect(toFleetError(native({ kind: 'acl', aclError: 100006 }), 'loadModel').code).toBe('MODEL_LOAD_FAILED');
    expect(toFleetError(native({ kind: 'acl', aclError: 545001, aclMessage: 'unsupported op Foo' }), 'loadModel').code).toBe('UNSUPPORTED_OP');
    expect(toFleetError(native({ kind: 'acl', aclError: 507011 }), 'execute').code).toBe('DEVICE_ERROR');
    expect(toFleetError(native({ kind: 'acl', aclError: 507047 }), 'execute').code).toBe('DEVICE_TIMEOUT');
    expect(toFleetError(native({ kind: 'acl', aclError: 107001 }), 'openDevice').code).toBe('INVALID_ARGUMENT');
    expect(toFleetError(native({ kind: 'closed' }), 'execute').code).toBe('CLOSED');
    expect(toFleetError(native({ kind: 'load' }), 'backendInfo').code).toBe('NATIVE_LOAD_FAILED');
    expect(toFleetError(new TypeError('x'), 'execute').code).toBe('INVALID_ARGUMENT');
  });
});

describe('addon loading', () => {
  it('puts NPU_FLEET_ADDON first, then build/Release, then build/Debug', () => {
    const c = addonCandidates({ NPU_FLEET_ADDON: '/opt/x.node' });
    expect(c[0]).toBe('/opt/x.node');
    expect(c[1]).toMatch(/build\/Release\/npu_fleet\.node$/);
    expect(c[2]).toMatch(/build\/Debug\/npu_fleet\.node$/);
  });

  it('fails with one error listing every path tried and how to fix it', () => {
    const dir = tempDir('npu-fleet-addon-');
    const bogus = join(dir, 'bogus.node');
    writeFileSync(bogus, 'not an ELF file');
    const e = thrown(() => loadAddonFrom([join(dir, 'missing.node'), bogus]));
    expect(e.code).toBe('NATIVE_LOAD_FAILED');
    expect(e.message).toContain('missing.node: not found');
    expect(e.message).toContain('bogus.node:');
    expect(e.message).toContain('npm run build:native');
    expect(e.details['tried']).toHaveLength(2);
  });
});
