// Device memory across hot reloads on the real simulator: what a retired version, a failed load
// and a refused (mismatched) load took is given back.
import { cpSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { openDevice, type Device } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { ModelLanes } from '../../../src/runtime/model-lanes.ts';
import { scanRepository } from '../../../src/runtime/model-repository.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

process.env.NPU_FLEET_DEVICE = 'sim';
const MODEL = 'mlp-classifier';
let device: Device | undefined;
afterEach(async () => {
  await device?.close();
  device = undefined;
});

describe('device memory across hot reloads (simulator)', () => {
  it('returns to what one loaded version takes after versions come and go, fail to load or do not match config.yaml', async () => {
    const repo = join(tempDir('npu-fleet-reload-mem-'), 'models');
    const modelDir = join(repo, MODEL);
    cpSync(join('examples/models', MODEL), modelDir, { recursive: true });
    device = await openDevice(0);
    const used = async (): Promise<number> => {
      const m = await device!.memInfo();
      return m.totalBytes - m.freeBytes;
    };
    const baseline = await used();
    const lanes = new ModelLanes(device, createLogger({ level: 'silent' }), parseFleetConfig({ devices: { count: 1, backend: 'sim' } }));
    const scan = () => scanRepository(repo, { artifact: 'onnx' });
    await lanes.apply(scan());
    const oneVersion = (await used()) - baseline;
    expect(oneVersion).toBeGreaterThan(0);

    const addVersion = (v: string, bytesFrom: string | Buffer): void => {
      mkdirSync(join(modelDir, v));
      if (typeof bytesFrom === 'string') cpSync(bytesFrom, join(modelDir, v, 'model.onnx'));
      else writeFileSync(join(modelDir, v, 'model.onnx'), bytesFrom);
    };
    for (let v = 2; v <= 6; v++) {
      addVersion(String(v), join(modelDir, '1', 'model.onnx'));
      await lanes.apply(scan(), { reload: true });
      expect(lanes.servedVersions()).toEqual([{ model: MODEL, version: String(v) }]);
      expect((await used()) - baseline, `after version ${v}`).toBe(oneVersion);
    }
    // A file that does not parse, and another model's file (tensors differ from config.yaml).
    addVersion('7', Buffer.alloc(4096, 7));
    await lanes.apply(scan(), { reload: true });
    addVersion('8', join('examples/models/small-cnn/1/model.onnx'));
    await lanes.apply(scan(), { reload: true });
    expect(lanes.servedVersions()).toEqual([{ model: MODEL, version: '6' }]);
    expect((await used()) - baseline).toBe(oneVersion);
    await lanes.unloadAll();
    expect(await used()).toBe(baseline);
  });
});
