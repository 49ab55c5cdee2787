import { mkdirSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { scanRepository, scanRepositorySettled } from '../../../src/runtime/model-repository.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const CONFIG = `name: a
inputs: [{ name: input, dtype: float32, dims: [-1, 4] }]
outputs: [{ name: y, dtype: float32, dims: [-1, 2] }]
maxBatchSize: 8
`;

/** Model `a` with version 1 written long ago. */
function repo(): string {
  const dir = tempDir('npu-fleet-startup-');
  mkdirSync(join(dir, 'a', '1'), { recursive: true });
  writeFileSync(join(dir, 'a', 'config.yaml'), CONFIG);
  writeFileSync(join(dir, 'a', '1', 'model.onnx'), 'old model');
  const past = new Date(Date.now() - 60_000);
  utimesSync(join(dir, 'a', '1', 'model.onnx'), past, past);
  return dir;
}

describe('the start-up scan of the model repository', () => {
  it('waits for a model file still being copied in, and serves it once complete (not half of it)', async () => {
    const dir = repo();
    mkdirSync(join(dir, 'a', '2'));
    const file = join(dir, 'a', '2', 'model.onnx');
    writeFileSync(file, 'half');
    // The copy goes on for a while after the worker started.
    const copy = new Promise<void>((resolve) => setTimeout(() => resolve(writeFileSync(file, 'half of the model, then the rest')), 150));
    const waits: number[] = [];
    const snap = await scanRepositorySettled(dir, { artifact: 'onnx' }, { settleMs: 300, maxWaitMs: 5_000, onWait: (ms) => waits.push(ms) });
    await copy;
    const served = snap.models.get('a')?.served ?? [];
    expect(served.map((v) => v.version)).toEqual(['2']);
    // The stamp is inode:size:mtime: the complete file's size.
    expect(served[0]?.artifactStamp?.split(':')[1]).toBe(String('half of the model, then the rest'.length));
    expect(waits.length).toBeGreaterThan(0);
  });

  it('does not wait when every served file is settled, and gives up waiting after maxWaitMs', async () => {
    const dir = repo();
    const t0 = Date.now();
    const settled = await scanRepositorySettled(dir, { artifact: 'onnx' }, { settleMs: 300, maxWaitMs: 5_000 });
    expect(Date.now() - t0).toBeLessThan(100);
    expect(settled.models.get('a')?.served.map((v) => v.version)).toEqual(['1']);

    mkdirSync(join(dir, 'a', '2'));
    const file = join(dir, 'a', '2', 'model.onnx');
    writeFileSync(file, 'x');
    // A file that never stops changing: taken as it is after maxWaitMs.
    const timer = setInterval(() => writeFileSync(file, `x${Date.now()}`), 50);
    try {
      const t1 = Date.now();
      const snap = await scanRepositorySettled(dir, { artifact: 'onnx' }, { settleMs: 300, maxWaitMs: 600 });
      expect(Date.now() - t1).toBeGreaterThanOrEqual(550);
      expect(Date.now() - t1).toBeLessThan(2_000);
      expect(snap.models.get('a')?.served.map((v) => v.version)).toEqual(['2']);
    } finally {
      clearInterval(timer);
    }
  });
});

describe('model files stamped by another clock', () => {
  it('a version whose file has an mtime far in the future (a tar from a host whose clock is ahead) is served, not held back until the clock passes it', async () => {
    const dir = repo();
    mkdirSync(join(dir, 'a', '2'));
    const file = join(dir, 'a', '2', 'model.onnx');
    writeFileSync(file, 'from a skewed host');
    const future = new Date(Date.now() + 3_600_000);
    utimesSync(file, future, future);
    utimesSync(join(dir, 'a', '2'), future, future);
    // A poll's scan (settleMs) and the start-up scan alike.
    expect(scanRepository(dir, { artifact: 'onnx', settleMs: 500 }).models.get('a')?.served.map((v) => v.version)).toEqual(['2']);
    const t0 = Date.now();
    const snap = await scanRepositorySettled(dir, { artifact: 'onnx' }, { settleMs: 500, maxWaitMs: 5_000 });
    expect(Date.now() - t0).toBeLessThan(200);
    expect(snap.models.get('a')?.served.map((v) => v.version)).toEqual(['2']);
  });
});
