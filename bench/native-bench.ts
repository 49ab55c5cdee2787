/**
 * Native binding benchmark (issue 3), measured in one run:
 *  1. binding overhead per execute on a tiny model (µs): sequential round trips and pipelined;
 *  2. throughput with two slots vs one under the simulator's device time model (overlap gain);
 *  3. the example MLP at batch 32 through the binding vs onnxruntime-node on the same machine.
 *
 *   npx tsx bench/native-bench.ts            (all sections; each runs in its own child process
 *                                              because the simulator reads its profile at init)
 *
 * Figures are printed as a table; ratios are computed from numbers taken in this same run.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SELF = fileURLToPath(import.meta.url);
const ROOT = join(SELF, '..', '..');
const MLP = join(ROOT, 'examples', 'models', 'mlp-classifier', '1', 'model.onnx');

type Result = Record<string, number>;

async function writeAffine(width: number): Promise<string> {
  const { encodeModel } = await import('../scripts/onnx/onnx-model.ts');
  const { f32 } = await import('../scripts/onnx/tensors.ts');
  const path = join(mkdtempSync(join(tmpdir(), 'npu-fleet-bench-')), `affine-${width}.onnx`);
  const bytes = encodeModel({
    graph: {
      name: 'affine',
      nodes: [
        { opType: 'Mul', inputs: ['x', 'two'], outputs: ['x2'] },
        { opType: 'Add', inputs: ['x2', 'one'], outputs: ['y'] },
      ],
      inputs: [{ name: 'x', dtype: 'float32', dims: ['batch', width] }],
      outputs: [{ name: 'y', dtype: 'float32', dims: ['batch', width] }],
      initializers: [f32('two', [1], [2]), f32('one', [1], [1])],
    },
    opsetImports: [{ domain: '', version: 17 }],
  });
  writeFileSync(path, bytes);
  return path;
}

function f32Input(n: number): Uint8Array {
  const x = Float32Array.from({ length: n }, (_, i) => (i % 97) * 0.01);
  return new Uint8Array(x.buffer);
}

/** Runs `count` executes with `inFlight` concurrent callers; returns wall ms per execute. */
async function drive(run: () => Promise<unknown>, count: number, inFlight: number): Promise<number> {
  let started = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (started < count) {
        started++;
        await run();
      }
    }),
  );
  return (performance.now() - t0) / count;
}

async function overhead(): Promise<Result> {
  const { openDevice } = await import('../src/device/index.ts');
  const device = await openDevice(0);
  const model = await device.loadModel(await writeAffine(4), { gears: [1] });
  const input = [{ data: f32Input(4), dims: [1, 4] }];
  let deviceMs = 0;
  const run = async (): Promise<void> => {
    const r = await model.execute(input, 1);
    deviceMs += r.timings.copyInMs + r.timings.executeMs + r.timings.copyOutMs;
  };
  await drive(run, 2_000, 1); // warm-up
  deviceMs = 0;
  const n = 10_000;
  const sequentialMs = await drive(run, n, 1);
  const insideMs = deviceMs / n;
  const pipelinedMs = await drive(run, n, 4);
  await model.unload();
  await device.close();
  return { sequentialUs: sequentialMs * 1000, deviceTimingsUs: insideMs * 1000, pipelinedUs: pipelinedMs * 1000 };
}

async function slots(width: number, gear: number): Promise<Result> {
  const { openDevice } = await import('../src/device/index.ts');
  const device = await openDevice(0);
  const path = width === 64 ? MLP : await writeAffine(width);
  const input = [{ data: f32Input(gear * width), dims: [gear, width] }];
  const out: Result = {};
  for (const n of [1, 2] as const) {
    const model = await device.loadModel(path, { gears: [gear], slots: n });
    const run = (): Promise<unknown> => model.execute(input, gear);
    await drive(run, 10, 4);
    const perBatchMs = await drive(run, 150, 4);
    out[`slots${n}BatchesPerS`] = 1000 / perBatchMs;
    await model.unload();
  }
  await device.close();
  return out;
}

async function mlpVsOrt(): Promise<Result> {
  const { openDevice } = await import('../src/device/index.ts');
  const ort = await import('onnxruntime-node');
  const batch = 32;
  const x = Float32Array.from({ length: batch * 64 }, (_, i) => Math.sin(i));
  const n = 3_000;

  const session = await ort.InferenceSession.create(MLP);
  const tensor = new ort.Tensor('float32', x, [batch, 64]);
  const runOrt = (): Promise<unknown> => session.run({ input: tensor });
  await drive(runOrt, 300, 1);
  const ortMs = await drive(runOrt, n, 1);

  const device = await openDevice(0);
  const model = await device.loadModel(MLP, { gears: [1, 2, 4, 8, 16, 32] });
  const input = [{ data: new Uint8Array(x.buffer), dims: [batch, 64] }];
  const runSim = (): Promise<unknown> => model.execute(input, batch);
  await drive(runSim, 300, 1);
  const simMs = await drive(runSim, n, 1);
  const simPipelinedMs = await drive(runSim, n, 2);
  await model.unload();
  await device.close();
  await session.release();
  return { ortUs: ortMs * 1000, bindingUs: simMs * 1000, bindingPipelinedUs: simPipelinedMs * 1000 };
}

const SECTIONS: Record<string, { env: Record<string, string>; run: () => Promise<Result> }> = {
  overhead: { env: {}, run: overhead },
  'slots-large-io': { env: { NPU_FLEET_SIM_PROFILE: 'base=4ms,perItem=0ms' }, run: () => slots(150_528, 8) },
  'slots-mlp': { env: { NPU_FLEET_SIM_PROFILE: 'base=2ms,perItem=0.25ms' }, run: () => slots(64, 32) },
  mlp: { env: {}, run: mlpVsOrt },
};

function child(name: string): Result {
  const section = SECTIONS[name]!;
  const stdout = execFileSync(process.execPath, [...process.execArgv, SELF, '--section', name], {
    env: { ...process.env, NPU_FLEET_DEVICE: 'sim', ...section.env },
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const line = stdout.trim().split('\n').pop() ?? '{}';
  return JSON.parse(line) as Result;
}

const fmt = (v: number | undefined, digits = 1): string => (v === undefined ? '-' : v.toFixed(digits));

async function main(): Promise<void> {
  const at = process.argv.indexOf('--section');
  if (at >= 0) {
    const name = process.argv[at + 1] ?? '';
    const result = await SECTIONS[name]!.run();
    process.stdout.write(`${JSON.stringify(result)}\n`);
    return;
  }
  const o = child('overhead');
  const large = child('slots-large-io');
  const small = child('slots-mlp');
  const m = child('mlp');
  const rows: Array<[string, string]> = [
    ['tiny model, sequential round trip per execute (µs)', fmt(o['sequentialUs'])],
    ['  of which device-side copy+execute timings (µs)', fmt(o['deviceTimingsUs'])],
    ['  binding overhead per execute (µs)', fmt((o['sequentialUs'] ?? 0) - (o['deviceTimingsUs'] ?? 0))],
    ['tiny model, 4 in flight, wall time per execute (µs)', fmt(o['pipelinedUs'])],
    ['4.8 MB in/out, device 4 ms: batches/s 1 slot', fmt(large['slots1BatchesPerS'])],
    ['4.8 MB in/out, device 4 ms: batches/s 2 slots', fmt(large['slots2BatchesPerS'])],
    ['  overlap gain (2 slots / 1 slot)', `${fmt((large['slots2BatchesPerS'] ?? 0) / (large['slots1BatchesPerS'] ?? 1), 2)}×`],
    ['MLP b32, device 2ms+0.25ms/item: batches/s 1 slot', fmt(small['slots1BatchesPerS'])],
    ['MLP b32, device 2ms+0.25ms/item: batches/s 2 slots', fmt(small['slots2BatchesPerS'])],
    ['  overlap gain (2 slots / 1 slot)', `${fmt((small['slots2BatchesPerS'] ?? 0) / (small['slots1BatchesPerS'] ?? 1), 2)}×`],
    ['MLP batch 32, onnxruntime-node per run (µs)', fmt(m['ortUs'])],
    ['MLP batch 32, binding + simulator per execute (µs)', fmt(m['bindingUs'])],
    ['MLP batch 32, binding, 2 in flight (µs per execute)', fmt(m['bindingPipelinedUs'])],
    ['  binding / onnxruntime (target ≤ 4×)', `${fmt((m['bindingUs'] ?? 0) / (m['ortUs'] ?? 1), 2)}×`],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  console.log('npu-fleet native binding bench (simulator backend)\n');
  for (const [k, v] of rows) console.log(`${k.padEnd(width)}  ${v}`);
}

await main();
