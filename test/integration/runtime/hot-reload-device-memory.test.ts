// Hot reload on a device whose memory holds two versions of the model, not three (the simulator's
// NPU_FLEET_SIM_DEVICE_MEMORY_BYTES; mlp-classifier takes ~205 KiB a version): a version that
// fails to load for want of memory is loaded once memory is given back.
import { cpSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { RunningWorker } from '../../../src/runtime/worker-process.ts';
import { until } from '../../helpers/until.ts';
import { fleetOnCopiedRepo } from './reload-fleet.ts';

process.env.NPU_FLEET_SIM_DEVICE_MEMORY_BYTES = String(500_000);

let worker: RunningWorker | undefined;
afterEach(async () => {
  await worker?.stop();
  worker = undefined;
});

const copyVersion = (modelDir: string, from: string, to: string): void => {
  cpSync(join(modelDir, from), join(modelDir, `.${to}`), { recursive: true });
  renameSync(join(modelDir, `.${to}`), join(modelDir, to));
};

describe('hot reload of a version that fails to load for want of device memory', () => {
  it('is loaded once a version leaving the repository gives its memory back, without touching its file', async () => {
    const f = await fleetOnCopiedRepo({
      prepare: (modelDir) => {
        const configPath = join(modelDir, 'config.yaml');
        writeFileSync(configPath, readFileSync(configPath, 'utf8').replace('versionPolicy: { kind: latest }', 'versionPolicy: { kind: latest, count: 2 }'));
        copyVersion(modelDir, '1', '2');
      },
    });
    worker = f.running;
    const modelDir = join(f.repo, 'mlp-classifier');
    expect(await f.ask()).toMatchObject({ status: 'ok', version: '2' });
    expect(await f.ask('1')).toMatchObject({ status: 'ok', version: '1' });

    // Version 3 would be the third copy on the device: it does not fit while 1 and 2 are loaded.
    copyVersion(modelDir, '1', '3');
    await until(() => f.failures().length > 0, 20_000, 'the load of version 3 to fail');
    expect((f.failures()[0]?.err as { code?: string }).code).toBe('DEVICE_OUT_OF_MEMORY');
    expect(await f.ask()).toMatchObject({ status: 'ok', version: '2' });

    // The operator makes room: version 1 leaves, is drained and unloaded.
    rmSync(join(modelDir, '1'), { recursive: true });
    await until(() => f.lines.some((l) => l.msg === 'version unloaded' && l.version === '1'), 20_000, 'version 1 to be unloaded');
    await until(() => f.lines.some((l) => l.msg === 'model version loaded' && l.version === '3'), 10_000, 'version 3 to load into the memory given back');
    let r = await f.ask();
    for (let i = 0; i < 20 && r.version !== '3'; i++) r = await f.ask();
    expect(r).toMatchObject({ status: 'ok', version: '3' });
    await f.producer.close();
  }, 90_000);
});
