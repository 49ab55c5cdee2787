/**
 * The tensor desc of a range-dynamic input declares the model's input format
 * (aclmdlGetInputFormat), as ais_bench does: NCHW for a 4-D image input. Real ACL checks the
 * desc against the model and may refuse ND there. The simulator accepts any format, so the ACL
 * library here is a shim in front of libacl_sim.so that plays real ACL: its aclCreateTensorDesc
 * refuses (nullptr) a format other than the one the test expects and logs each call, and it can
 * play a library whose aclmdlGetInputFormat cannot say (ACL_FORMAT_UNDEFINED), where ND is the
 * fallback. Each case runs in a child process: the ACL library is resolved once per process.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { attr, encodeModel } from '../../scripts/onnx/onnx-model.ts';
import { addonCandidates } from '../../src/device/native-addon.ts';
import { tempDir } from '../helpers/temp-dir.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const ADDON = addonCandidates().find((p) => existsSync(p));
const SIM = join(dirname(ADDON ?? ''), 'libacl_sim.so');
const ACL_FORMAT_NCHW = 0;
const ACL_FORMAT_ND = 2;

const SHIM = `
#include <dlfcn.h>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

extern "C" {
struct aclTensorDesc;
struct aclmdlDesc;
using CreateDesc = aclTensorDesc *(*)(int, int, const int64_t *, int);
using InputFormat = int (*)(const aclmdlDesc *, size_t);

static void *Sim(const char *name) {
  static void *sim = dlopen(SIM_PATH, RTLD_NOW | RTLD_NOLOAD);
  return sim ? dlsym(sim, name) : nullptr;
}

aclTensorDesc *aclCreateTensorDesc(int dtype, int numDims, const int64_t *dims, int format) {
  const int want = std::atoi(std::getenv("SHIM_EXPECT_FORMAT"));
  std::fprintf(stderr, "shim aclCreateTensorDesc dims=%d format=%d\\n", numDims, format);
  if (format != want) return nullptr;
  return reinterpret_cast<CreateDesc>(Sim("aclCreateTensorDesc"))(dtype, numDims, dims, format);
}

int aclmdlGetInputFormat(const aclmdlDesc *desc, size_t index) {
  if (std::getenv("SHIM_FORMAT_UNDEFINED") != nullptr) return -1;
  return reinterpret_cast<InputFormat>(Sim("aclmdlGetInputFormat"))(desc, index);
}
}
`;

const dir = tempDir('npu-fleet-range-format-');

/** The ACL library the addon opens: the shim, which loads libacl_sim.so for everything else. */
function buildShim(): string {
  const src = join(dir, 'acl-shim.cc');
  const lib = join(dir, 'libacl_shim.so');
  writeFileSync(src, SHIM);
  const r = spawnSync('c++', ['-std=c++17', '-shared', '-fPIC', `-DSIM_PATH="${SIM}"`, src, '-o', lib, '-Wl,--no-as-needed', SIM, `-Wl,-rpath,${dirname(SIM)}`, '-ldl'], { encoding: 'utf8' });
  expect(r.status, r.stderr).toBe(0);
  return lib;
}

/** Range-dynamic NCHW image input: y[b, c] = mean(x[b, c, :, :]) over [batch, 3, h, w] float32. */
function channelMeanModel(): string {
  const path = join(dir, 'channel-mean.onnx');
  const graph = {
    name: 'channel-mean',
    nodes: [{ opType: 'ReduceMean', inputs: ['x'], outputs: ['y'], attributes: { axes: attr.ints([2, 3]), keepdims: attr.i(0) } }],
    inputs: [{ name: 'x', dtype: 'float32' as const, dims: ['batch', 3, 'h', 'w'] }],
    outputs: [{ name: 'y', dtype: 'float32' as const, dims: ['batch', 3] }],
  };
  writeFileSync(path, encodeModel({ graph, irVersion: 8, opsetImports: [{ domain: '', version: 17 }] }));
  return path;
}

const B = 2;
const C = 3;
const H = 5;
const W = 6;
const X = Float32Array.from({ length: B * C * H * W }, (_, i) => (i % 11) - 3);

const PROBE = `
import { openDevice } from './src/device/index.ts';
const x = Float32Array.from({ length: ${B * C * H * W} }, (_, i) => (i % 11) - 3);
const device = await openDevice(0);
try {
  const model = await device.loadModel(process.env.MODEL_PATH, { gears: [1, 2, 4], maxInputDims: { x: [4, 3, 8, 8] } });
  const r = await model.execute([{ data: new Uint8Array(x.buffer), dims: [${B}, ${C}, ${H}, ${W}] }], ${B});
  const out = r.outputs[0];
  console.log(JSON.stringify({ dims: out.dims, y: Array.from(new Float32Array(out.data.buffer, out.data.byteOffset, out.data.byteLength / 4)) }));
  await model.unload();
} catch (e) {
  console.log(JSON.stringify({ error: e instanceof Error ? e.message : String(e) }));
} finally {
  await device.close();
}`;

function runThroughShim(shim: string, env: Record<string, string>): { dims?: number[]; y?: number[]; error?: string; formats: string[] } {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, ...env, NPU_FLEET_ACL_LIB: shim, MODEL_PATH: channelMeanModel() };
  // NPU_FLEET_DEVICE=sim would pick libacl_sim.so itself, past the shim.
  for (const k of ['NPU_FLEET_DEVICE', 'ASCEND_HOME_PATH', 'ASCEND_TOOLKIT_HOME']) delete childEnv[k];
  const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', PROBE], { cwd: ROOT, env: childEnv, encoding: 'utf8', timeout: 60_000 });
  expect(r.status, r.stderr).toBe(0);
  const formats = [...r.stderr.matchAll(/^shim aclCreateTensorDesc dims=(\d+) format=(-?\d+)$/gm)].map((m) => `${m[1]}-D format ${m[2]}`);
  return { ...(JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as { dims?: number[]; y?: number[]; error?: string }), formats };
}

function channelMeans(): number[] {
  const out: number[] = [];
  for (let bc = 0; bc < B * C; bc++) out.push(X.subarray(bc * H * W, (bc + 1) * H * W).reduce((a, v) => a + v, 0) / (H * W));
  return out;
}

describe('range-dynamic input tensor descs carry the model input format', () => {
  it('declares NCHW for a 4-D NCHW input (a library that refuses ND there runs the batch)', () => {
    expect(ADDON).toBeDefined();
    const r = runThroughShim(buildShim(), { SHIM_EXPECT_FORMAT: String(ACL_FORMAT_NCHW) });
    expect(r.error).toBeUndefined();
    expect(r.formats).toEqual([`4-D format ${ACL_FORMAT_NCHW}`]);
    expect(r.dims).toEqual([B, C]);
    r.y?.forEach((v, i) => expect(v).toBeCloseTo(channelMeans()[i] ?? NaN, 4));
    expect(r.y).toHaveLength(B * C);
  });

  it('falls back to ND when aclmdlGetInputFormat cannot say (ACL_FORMAT_UNDEFINED)', () => {
    const r = runThroughShim(buildShim(), { SHIM_EXPECT_FORMAT: String(ACL_FORMAT_ND), SHIM_FORMAT_UNDEFINED: '1' });
    expect(r.error).toBeUndefined();
    expect(r.formats).toEqual([`4-D format ${ACL_FORMAT_ND}`]);
    expect(r.dims).toEqual([B, C]);
    r.y?.forEach((v, i) => expect(v).toBeCloseTo(channelMeans()[i] ?? NaN, 4));
    expect(r.y).toHaveLength(B * C);
  });
});
