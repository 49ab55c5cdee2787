// A model repository on a volume that goes away under a running worker (real simulated device,
// memory broker, repository on disk): the worker serves on with what it loaded.
import { cpSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { RunningWorker } from '../../../src/runtime/worker-process.ts';
import { until } from '../../helpers/until.ts';
import { fleetOnCopiedRepo, MODEL } from './reload-fleet.ts';

let worker: RunningWorker | undefined;
afterEach(async () => {
  await worker?.stop();
  worker = undefined;
});

const drainOrUnload = (l: Record<string, unknown>): boolean => ['version removed; draining', 'version unloaded'].includes(String(l.msg));

describe('a model repository on a volume that goes away under a running worker', () => {
  it('an unmounted volume (its mount point left empty) unloads nothing; once mounted again, a new version loads', async () => {
    const f = await fleetOnCopiedRepo();
    worker = f.running;
    expect(await f.ask()).toMatchObject({ status: 'ok', version: '1' });
    const from = f.lines.length;
    // What an unmount leaves: the mount point, an empty directory.
    const away = `${f.repo}.away`;
    renameSync(f.repo, away);
    mkdirSync(f.repo);
    await new Promise((r) => setTimeout(r, 3_000));
    expect(await f.ask()).toMatchObject({ status: 'ok', version: '1' });
    expect(f.lines.slice(from).filter(drainOrUnload)).toEqual([]);
    const failed = f.lines.slice(from).filter((l) => l.msg === 'model repository reload failed; keeping the current versions');
    expect(failed.length).toBeGreaterThan(0);
    expect((failed[0]?.err as { message?: string }).message).toContain(`model repository ${f.repo} is empty now`);

    // Mounted again, with a version 2 pushed meanwhile: served as any new version.
    rmSync(f.repo, { recursive: true });
    cpSync(join(away, MODEL, '1'), join(away, MODEL, '.2'), { recursive: true });
    renameSync(join(away, MODEL, '.2'), join(away, MODEL, '2'));
    renameSync(away, f.repo);
    await until(() => f.lines.some((l) => l.msg === 'version unloaded' && l.version === '1'), 20_000, 'version 1 to be replaced by version 2');
    expect(await f.ask()).toMatchObject({ status: 'ok', version: '2' });
    await f.producer.close();
  }, 60_000);
});
