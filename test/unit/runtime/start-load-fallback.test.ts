/**
 * At start, a version the versionPolicy serves that fails to load no longer fails the worker when
 * the model can still be served: a running worker in that state keeps the version it had, so a
 * worker restarted (or scaled out) beside it must not crash-loop on the bad push.
 */
import { describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { type DeviceLike } from '../../../src/runtime/load-checked.ts';
import { ModelLanes } from '../../../src/runtime/model-lanes.ts';
import type { RepositorySnapshot } from '../../../src/runtime/model-repository.ts';
import { controlledDevice, MODEL, snapshotOf } from './fake-device-worker.ts';

/** mlp-classifier with `onDisk` version directories of which the policy serves `served`. */
function snapshot(onDisk: string[], served: string[], stamp = '1:1:1'): RepositorySnapshot {
  const snap = snapshotOf(...onDisk);
  const m = snap.models.get(MODEL)!;
  const versions = m.versions.map((v) => ({ ...v, artifactStamp: stamp }));
  return { ...snap, models: new Map([[MODEL, { ...m, versions, served: versions.filter((v) => served.includes(v.version)) }]]) };
}

/** A device on which loading the versions in `broken` fails, as a file for another SoC would. */
function deviceFailing(broken: Set<string>) {
  const base = controlledDevice();
  const device: DeviceLike = {
    ...base.device,
    loadModel: async (path, opts) => {
      const version = path.split('/').at(-2) as string;
      if (broken.has(version)) throw new Error(`aclmdlLoadFromFile failed: 500002 (version ${version})`);
      return base.device.loadModel(path, opts);
    },
  };
  return { device, loaded: base.loaded };
}

function lanesOn(device: DeviceLike, failed: string[] = []) {
  const lines: Array<Record<string, unknown>> = [];
  const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
  const lanes = new ModelLanes(device, log, parseFleetConfig({ devices: { count: 1, backend: 'sim' } }));
  const onLoadFailure = (model: string): void => void failed.push(model);
  return { lanes, lines, onLoadFailure };
}

const defaultVersion = (lanes: ModelLanes): string | undefined => {
  const lane = lanes.laneFor(MODEL, undefined);
  return lane.ok ? lane.lane.current().version : undefined;
};

describe('a served version that fails to load at start', () => {
  it('leaves the newest older version on disk serving, until a served one loads after its file changes', async () => {
    const broken = new Set(['2']);
    const d = deviceFailing(broken);
    const failed: string[] = [];
    const { lanes, lines, onLoadFailure } = lanesOn(d.device, failed);
    // versionPolicy latest 1: only 2 is served; 1 is a rollback target on disk.
    await lanes.apply(snapshot(['1', '2'], ['2']), { onLoadFailure });
    expect(defaultVersion(lanes)).toBe('1');
    expect([...d.loaded]).toEqual(['1']);
    expect(failed).toEqual([MODEL]);
    expect(lines.some((l) => l['level'] === 50 && String(l['msg']).includes('serving version 1 from disk'))).toBe(true);
    expect(lanes.subscriptions()).toEqual([{ model: MODEL, priorityLevels: 3 }]);

    // Polls with the same file change nothing and do not retry the load.
    await lanes.apply(snapshot(['1', '2'], ['2']), { reload: true, onLoadFailure });
    expect(failed).toEqual([MODEL]);
    expect(defaultVersion(lanes)).toBe('1');

    // Version 2 fixed in place (a new file): it loads, new batches switch to it, 1 drains away.
    broken.delete('2');
    const fixed = snapshot(['1', '2'], ['2'], '2:2:2');
    expect(lanes.hasRetryableFailures(fixed)).toBe(true);
    await lanes.apply(fixed, { reload: true, onLoadFailure });
    expect(defaultVersion(lanes)).toBe('2');
    expect([...d.loaded]).toEqual(['2']);
  });

  it('serves the versions that load when the policy serves several', async () => {
    const d = deviceFailing(new Set(['1']));
    const { lanes, onLoadFailure } = lanesOn(d.device);
    await lanes.apply(snapshot(['1', '2'], ['1', '2']), { onLoadFailure });
    expect(defaultVersion(lanes)).toBe('2');
    expect([...d.loaded]).toEqual(['2']);
  });

  it('fails the worker with the newest served version’s error when no version on disk loads', async () => {
    const d = deviceFailing(new Set(['1', '2', '3']));
    const { lanes, onLoadFailure } = lanesOn(d.device);
    await expect(lanes.apply(snapshot(['1', '2', '3'], ['3']), { onLoadFailure })).rejects.toThrow(/version 3/);
    expect(d.loaded.size).toBe(0);
  });
});
