// Hot reload when the new version cannot be loaded: a real simulated device, a real memory broker,
// a repository on disk. The model keeps serving its loaded version, the failure is reported once
// (log + metric) rather than retried every poll, and a fixed file is picked up.
import { cpSync, mkdirSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { RunningWorker } from '../../../src/runtime/worker-process.ts';
import { until } from '../../helpers/until.ts';
import { fleetOnCopiedRepo as startOnCopiedRepo, MODEL } from './reload-fleet.ts';

let worker: RunningWorker | undefined;
afterEach(async () => {
  await worker?.stop();
  worker = undefined;
});

async function fleetOnCopiedRepo() {
  const fleet = await startOnCopiedRepo();
  worker = fleet.running;
  return fleet;
}

describe('hot reload of a version that fails to load', () => {
  it('keeps serving the loaded version, reports the failure once, and loads the version once its file is fixed', async () => {
    const { repo, lines, running, producer, ask, failures } = await fleetOnCopiedRepo();
    expect((await ask()).version).toBe('1');

    // Version 2 appears with an artifact the device cannot deserialize.
    mkdirSync(join(repo, MODEL, '2'));
    writeFileSync(join(repo, MODEL, '2', 'model.onnx'), Buffer.alloc(4096, 7));
    await until(() => failures().length > 0, 20_000, 'the load failure to be logged');
    // Several more polls (1 s apart): no second attempt, no second report.
    await new Promise((r) => setTimeout(r, 3_500));
    expect(failures()).toHaveLength(1);
    expect(failures()[0]).toMatchObject({ model: MODEL, version: '2', serving: '1', level: 50 });
    expect(await running.metrics.render()).toMatch(/npu_fleet_model_load_failures_total\{model="mlp-classifier"[^}]*\} 1\n/);
    // The latest-version policy serves only v2, yet v1 was not retired: requests still succeed on it.
    const during = await ask();
    expect(during).toMatchObject({ status: 'ok', version: '1' });
    expect(lines.some((l) => String(l.msg).endsWith('; draining'))).toBe(false);

    // The operator replaces the file: the next poll loads it and new batches switch to v2.
    cpSync(join(repo, MODEL, '1', 'model.onnx'), join(repo, MODEL, '2', 'model.onnx'));
    const later = new Date(Date.now() + 1_000);
    utimesSync(join(repo, MODEL, '2', 'model.onnx'), later, later);
    await until(() => lines.some((l) => l.msg === 'model version loaded' && l.version === '2'), 20_000, 'version 2 to load');
    let after = await ask();
    for (let i = 0; i < 20 && after.version !== '2'; i++) after = await ask();
    expect(after).toMatchObject({ status: 'ok', version: '2' });
    await until(() => lines.some((l) => l.msg === 'version unloaded' && l.version === '1'), 20_000, 'version 1 to be unloaded');
    expect(failures()).toHaveLength(1);
    await producer.close();
  }, 90_000);

  // A copy that stalled past the settle time (a slow network copy) is loaded half-written and
  // fails; once the copy completes the version loads. The worker never served those bytes, so its
  // file changing is no "replaced in place" (that warning said the worker kept bytes it never had
  // and sent the operator to redeploy a version that was in fact loaded a moment later).
  it('a half-copied version that failed to load is loaded once its copy completes, without a "replaced in place" warning', async () => {
    const { repo, lines, ask, failures } = await fleetOnCopiedRepo();
    expect((await ask()).version).toBe('1');
    const bytes = readFileSync(join(repo, MODEL, '1', 'model.onnx'));
    const file = join(repo, MODEL, '2', 'model.onnx');
    mkdirSync(join(repo, MODEL, '2'));
    writeFileSync(file, bytes.subarray(0, bytes.length >> 1));
    await until(() => failures().length > 0, 20_000, 'the half-copied file to fail its load');
    writeFileSync(file, bytes);
    await until(() => lines.some((l) => l.msg === 'model version loaded' && l.version === '2'), 20_000, 'version 2 to load');
    expect(lines.filter((l) => String(l.msg).startsWith('model file replaced in place'))).toEqual([]);
    let after = await ask();
    for (let i = 0; i < 20 && after.version !== '2'; i++) after = await ask();
    expect(after).toMatchObject({ status: 'ok', version: '2' });
  }, 60_000);

  it('a version whose model file does not match config.yaml is refused the same way, naming the difference', async () => {
    const { repo, lines, ask, failures } = await fleetOnCopiedRepo();
    expect((await ask()).version).toBe('1');
    // Another model's file (image [-1,1,28,28] -> logits) dropped in as version 2.
    mkdirSync(join(repo, MODEL, '2'));
    cpSync(join('examples/models/small-cnn/1/model.onnx'), join(repo, MODEL, '2', 'model.onnx'));
    await until(() => failures().length > 0, 20_000, 'the mismatch to be logged');
    const err = failures()[0]?.err as { message?: string } | undefined;
    expect(err?.message).toMatch(/mlp-classifier version 2: config\.yaml does not match .*inputs: config\.yaml lists \[input\] but the model has \[image\].*outputs: config\.yaml lists \[probs\] but the model has \[logits\]/);
    expect(await ask()).toMatchObject({ status: 'ok', version: '1' });
    // Version 1 is no longer the one the policy selects, but it serves on: not "removed".
    expect(lines.filter((l) => l.msg === 'model repository changed').map((l) => ({ added: l.added, removed: l.removed, stillServing: l.stillServing }))).toEqual([
      { added: [`${MODEL}@2`], removed: [], stillServing: [`${MODEL}@1`] },
    ]);
  }, 60_000);
});

describe('hot reload of a config.yaml edited into an invalid file', () => {
  it('keeps serving the model with its last valid config and logs the problem once', async () => {
    const { repo, lines, ask } = await fleetOnCopiedRepo();
    expect((await ask()).version).toBe('1');
    const configPath = join(repo, MODEL, 'config.yaml');
    writeFileSync(configPath, 'name: mlp-classifier\nmaxBatchSize: [oops\n');
    const reported = () => lines.filter((l) => l.path === configPath);
    // Several polls (1 s apart): the model is still served, on its loaded version, and the broken
    // file is reported once, naming it.
    await new Promise((r) => setTimeout(r, 3_500));
    expect(await ask()).toMatchObject({ status: 'ok', version: '1' });
    expect(lines.some((l) => String(l.msg).endsWith('; draining') || l.msg === 'version unloaded')).toBe(false);
    expect(reported()).toHaveLength(1);
    expect(reported()[0]).toMatchObject({ level: 40 });
    expect(String(reported()[0]?.msg)).toMatch(/invalid model config.*maxBatchSize|YAML/);
    // Fixed again: nothing more to report, still served.
    writeFileSync(configPath, readFileSync(join('examples/models', MODEL, 'config.yaml')));
    await new Promise((r) => setTimeout(r, 2_000));
    expect(reported()).toHaveLength(1);
    expect(await ask()).toMatchObject({ status: 'ok', version: '1' });
  }, 60_000);
});

describe('hot reload of a model file replaced in place', () => {
  it('keeps serving the loaded version through the rewrite (no drain, no reload) and warns once that the new bytes need a new version', async () => {
    const { repo, lines, ask } = await fleetOnCopiedRepo();
    expect((await ask()).version).toBe('1');
    const file = join(repo, MODEL, '1', 'model.onnx');
    // A slow copy over the served file: its mtime keeps moving for a few polls.
    const bytes = readFileSync(file);
    const from = lines.length;
    writeFileSync(file, bytes.subarray(0, 100));
    for (let i = 0; i < 12; i++) {
      await new Promise((r) => setTimeout(r, 200));
      const now = new Date();
      utimesSync(file, now, now);
    }
    writeFileSync(file, bytes);
    const warned = () => lines.filter((l) => l.msg === 'model file replaced in place; running workers keep the bytes they loaded (workers started later load the new file): deploy new bytes as a new version directory');
    await until(() => warned().length > 0, 20_000, 'the in-place replacement to be logged');
    await new Promise((r) => setTimeout(r, 2_500));
    expect(warned()).toHaveLength(1);
    expect(warned()[0]).toMatchObject({ model: MODEL, version: '1', path: file, level: 40 });
    expect(lines.slice(from).filter((l) => String(l.msg).endsWith('; draining') || ['version unloaded', 'model version loaded', 'model repository changed'].includes(String(l.msg)))).toEqual([]);
    expect(await ask()).toMatchObject({ status: 'ok', version: '1' });
  }, 60_000);
});
