import { afterEach, describe, expect, it, vi } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { type DeviceLike } from '../../../src/runtime/load-checked.ts';
import { ModelLanes, RETRIABLE_LOAD_RETRY_MS, type Lane } from '../../../src/runtime/model-lanes.ts';
import { controlledDevice, MODEL, modelConfig, request, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});

describe('hot reload on a device worker (controlled device)', () => {
  it('requests queued when their model leaves the repository still get a result', async () => {
    h = await startWorker(snapshotOf('1'));
    const { producer, executions, results, worker } = h;
    // An urgent request occupies the device; bulk work then waits for the device to be idle.
    await producer.publish(request('urgent', 0));
    await until(() => executions.length === 1, 2000, 'the urgent batch on the device');
    await producer.publish(request('bulk', 2));
    await new Promise((r) => setTimeout(r, 50));
    expect(executions).toHaveLength(1);

    await worker.applySnapshot(snapshotOf());
    executions[0]!.release();
    await until(() => results.has('urgent'), 2000, 'the urgent result');
    // The queued request runs on the draining version before it is unloaded (or is answered otherwise).
    await until(() => executions.length === 2, 2000, 'the bulk batch to reach the device');
    executions[1]!.release();
    await until(() => results.has('bulk'), 2000, 'the bulk result');
    expect(results.get('bulk')).toMatchObject([{ status: 'ok', version: '1' }]);
    await until(() => !h!.loaded.has('1'), 2000, 'version 1 to be unloaded once drained');
  });

  it('a version put back while it still drains serves again (rollback)', async () => {
    h = await startWorker(snapshotOf('1'));
    const { producer, executions, results, worker, loaded } = h;
    await producer.publish(request('a', 0));
    await until(() => executions.length === 1, 2000, 'a batch on version 1');
    // v2 is deployed while a batch runs on v1, then rolled back (v2 removed) before that batch ends.
    await worker.applySnapshot(snapshotOf('2'));
    await worker.applySnapshot(snapshotOf('1'));
    executions[0]!.release();
    await until(() => results.has('a'), 2000, 'result of a');
    await new Promise((r) => setTimeout(r, 50));
    expect(loaded.has('1')).toBe(true);
    await producer.publish(request('b', 0));
    await until(() => executions.length === 2, 2000, 'b on the device');
    executions[1]!.release();
    await until(() => results.has('b'), 2000, 'result of b');
    expect(results.get('b')).toMatchObject([{ status: 'ok', version: '1' }]);
  });

  it('a retiring version is unloaded even when its pinned requests expire instead of running', async () => {
    h = await startWorker(snapshotOf('1', '2'));
    const { producer, executions, results, worker, loaded } = h;
    await producer.publish(request('urgent', 0));
    await until(() => executions.length === 1, 2000, 'the urgent batch on the device');
    await producer.publish(request('urgent2', 0));
    await until(() => executions.length === 2, 2000, 'both device slots taken');
    // Pinned to v1, held behind the two batches, with a deadline it will miss.
    await producer.publish(request('pinned', 2, { version: '1', deadlineAt: Date.now() + 100 }));
    await new Promise((r) => setTimeout(r, 30));
    await worker.applySnapshot(snapshotOf('2'));
    await new Promise((r) => setTimeout(r, 150));
    executions[0]!.release();
    await until(() => results.has('pinned'), 2000, 'the pinned request to expire');
    expect(results.get('pinned')).toMatchObject([{ status: 'expired' }]);
    expect(executions).toHaveLength(2);
    await until(() => !loaded.has('1'), 2000, 'version 1 to be unloaded');
  });
});

describe('ModelLanes reload ordering', () => {
  it('a version loading while the model\'s last drained version is unloaded ends up served (not lost with the old entry)', async () => {
    const gate: { open?: () => void } = {};
    const base = controlledDevice();
    const device: DeviceLike = {
      ...base.device,
      // Version 2 takes a while to load (a real NPU takes seconds); version 1 loads at once.
      loadModel: async (path, opts) => {
        if (path.includes('/2/')) await new Promise<void>((r) => (gate.open = r));
        return base.device.loadModel(path, opts);
      },
    };
    const log = createLogger({ level: 'silent' });
    const lanes = new ModelLanes(device, log, parseFleetConfig({ devices: { count: 1, backend: 'sim' } }));
    await lanes.apply(snapshotOf('1'));
    const first = lanes.laneFor(MODEL, undefined);
    if (!first.ok) throw first.error;
    // A batch runs on v1 when every version leaves the repository, then v2 arrives.
    const v1 = first.lane.current();
    v1.inflight++;
    await lanes.apply(snapshotOf(), { reload: true });
    const applying = lanes.apply(snapshotOf('2'), { reload: true });
    await until(() => gate.open !== undefined, 2000, 'version 2 to start loading');
    // The v1 batch completes while v2 is still loading: v1 is drained and unloaded.
    v1.inflight--;
    await lanes.retireIfIdle(v1);
    expect(base.loaded.has('1')).toBe(false);
    gate.open?.();
    // Served before (so still subscribed): not reported as a new model needing a worker restart.
    expect(await applying).toEqual([]);
    const after = lanes.laneFor(MODEL, undefined);
    expect(after.ok).toBe(true);
    if (after.ok) expect(after.lane.current().version).toBe('2');
    expect(lanes.serves(MODEL)).toBe(true);
  });
});

describe('a model whose every version left the repository', () => {
  it('rejects new requests at once, saying it has no version left rather than listing itself as served', async () => {
    h = await startWorker(snapshotOf('1'));
    const { producer, results, worker, executions } = h;
    await producer.publish(request('before', 0));
    await until(() => executions.length === 1, 2000, 'a batch on version 1');
    await worker.applySnapshot(snapshotOf());
    await producer.publish(request('after', 0));
    await until(() => results.has('after'), 2000, 'an answer for the request sent after the removal');
    const [r] = results.get('after') ?? [];
    expect(r).toMatchObject({ status: 'rejected', error: { code: 'UNKNOWN_MODEL' } });
    expect(r?.error?.message).toBe(`model "${MODEL}" has no servable version in the model repository any more (served: none)`);
    executions[0]!.release();
    await until(() => results.has('before'), 2000, 'the batch in flight to finish');
    expect(results.get('before')).toMatchObject([{ status: 'ok', version: '1' }]);
  });
});

describe('a version that failed to load during a hot reload', () => {
  it('is tried again when its file is copied in anew with the same mtime (cp -p, rsync -a), not only when the mtime changes', async () => {
    const base = controlledDevice();
    let failNext = true;
    let loads = 0;
    const device: DeviceLike = {
      ...base.device,
      // The first load of version 2 fails, as a device short of memory would.
      loadModel: async (path, opts) => {
        if (path.includes('/2/')) {
          loads++;
          if (failNext) {
            failNext = false;
            throw new Error('aclmdlLoadFromFile failed: 207001 ACL_ERROR_RT_MEMORY_ALLOCATION');
          }
        }
        return base.device.loadModel(path, opts);
      },
    };
    const lanes = new ModelLanes(device, createLogger({ level: 'silent' }), parseFleetConfig({ devices: { count: 1, backend: 'sim' } }));
    await lanes.apply(snapshotOf('1'));
    const withStamp = (stamp: string) => {
      const snap = snapshotOf('1', '2');
      const m = snap.models.get(MODEL)!;
      const versions = m.versions.map((v) => ({ ...v, artifactStamp: v.version === '2' ? stamp : '1:1:1' }));
      return { ...snap, models: new Map([[MODEL, { ...m, versions, served: versions.slice(-1) }]]) };
    };
    await lanes.apply(withStamp('100:5:1'), { reload: true });
    expect(loads).toBe(1);
    expect(lanes.hasRetryableFailures(withStamp('100:5:1'))).toBe(false);
    // Removed and copied in again, mtime preserved: a new inode, the same modifiedAt.
    const recopied = withStamp('200:5:1');
    expect(lanes.hasRetryableFailures(recopied)).toBe(true);
    await lanes.apply(recopied, { reload: true });
    expect(loads).toBe(2);
    const lane = lanes.laneFor(MODEL, undefined);
    expect(lane.ok && lane.lane.current().version).toBe('2');
  });
});

describe('a version that failed to load for want of device memory', () => {
  it('is tried again after RETRIABLE_LOAD_RETRY_MS with its file unchanged (memory given back by another process); a malformed file is not', async () => {
    const base = controlledDevice();
    const loads = new Map<string, number>();
    const device: DeviceLike = {
      ...base.device,
      loadModel: async (path, opts) => {
        const version = path.split('/').at(-2) as string;
        const n = (loads.get(version) ?? 0) + 1;
        loads.set(version, n);
        if (version === '2' && n === 1) throw new FleetError('DEVICE_OUT_OF_MEMORY', 'aclmdlLoadFromFile: 207001 ACL_ERROR_RT_MEMORY_ALLOCATION');
        if (version === '3') throw new FleetError('MODEL_LOAD_FAILED', 'aclmdlLoadFromFile: 500002 malformed model');
        return base.device.loadModel(path, opts);
      },
    };
    const lanes = new ModelLanes(device, createLogger({ level: 'silent' }), parseFleetConfig({ devices: { count: 1, backend: 'sim' } }));
    await lanes.apply(snapshotOf('1'));
    let nowMs = Date.now();
    const clock = vi.spyOn(Date, 'now').mockImplementation(() => nowMs);
    try {
      await lanes.apply(snapshotOf('1', '2'), { reload: true });
      expect(loads.get('2')).toBe(1);
      nowMs += RETRIABLE_LOAD_RETRY_MS - 1;
      expect(lanes.hasRetryableFailures(snapshotOf('1', '2'))).toBe(false);
      nowMs += 1;
      expect(lanes.hasRetryableFailures(snapshotOf('1', '2'))).toBe(true);
      await lanes.apply(snapshotOf('1', '2'), { reload: true });
      expect(loads.get('2')).toBe(2);
      const lane = lanes.laneFor(MODEL, undefined);
      expect(lane.ok && lane.lane.current().version).toBe('2');

      // Version 3's file does not parse: neither time nor version 1 unloaded meanwhile brings it back.
      await lanes.apply(snapshotOf('2', '3'), { reload: true });
      expect(loads.get('3')).toBe(1);
      expect(base.loaded.has('1')).toBe(false);
      nowMs += 10 * RETRIABLE_LOAD_RETRY_MS;
      expect(lanes.hasRetryableFailures(snapshotOf('2', '3'))).toBe(false);
    } finally {
      clock.mockRestore();
    }
  });
});

describe('a model that appears in the repository while the worker runs', () => {
  it('is reported once for a restart and not loaded on the device (no subscription would ever use it)', async () => {
    const base = controlledDevice();
    const paths: string[] = [];
    const device: DeviceLike = { ...base.device, loadModel: (path, opts) => (paths.push(path), base.device.loadModel(path, opts)) };
    const lanes = new ModelLanes(device, createLogger({ level: 'silent' }), parseFleetConfig({ devices: { count: 1, backend: 'sim' } }));
    await lanes.apply(snapshotOf('1'));
    const other = { ...modelConfig, name: 'other-model' };
    const v = { model: 'other-model', version: '1', artifactPath: '/fake/other-model/1/model.onnx', modifiedAt: 1 };
    const withOther = snapshotOf('1');
    const models = new Map(withOther.models);
    models.set('other-model', { name: 'other-model', config: other, versions: [v], served: [v] });
    expect(await lanes.apply({ ...withOther, models }, { reload: true })).toEqual(['other-model']);
    expect(paths.filter((p) => p.includes('other-model'))).toEqual([]);
    expect(lanes.serves('other-model')).toBe(false);
    expect(lanes.subscriptions().map((s) => s.model)).toEqual([MODEL]);
    // A later reload (a new version of the first model) does not report it again.
    expect(await lanes.apply({ ...withOther, models }, { reload: true })).toEqual([]);
  });
});

describe('a config.yaml edit whose versionPolicy selects none of the versions on disk', () => {
  it('keeps the model serving what it has (a typo such as versions: [20] for [2]), while removing every version still retires it', async () => {
    h = await startWorker(snapshotOf('1'));
    const { producer, executions, results, worker, loaded } = h;
    const typo = snapshotOf('1');
    const m = typo.models.get(MODEL)!;
    await worker.applySnapshot({ ...typo, models: new Map([[MODEL, { ...m, config: { ...m.config, versionPolicy: { kind: 'specific', versions: [20] } }, served: [] }]]) });
    await producer.publish(request('after-typo', 0));
    await until(() => executions.length === 1 || results.has('after-typo'), 2000, 'the request after the edit to be dispatched or answered');
    expect(results.get('after-typo')).toBeUndefined();
    executions[0]!.release();
    await until(() => results.has('after-typo'), 2000, 'its result');
    expect(results.get('after-typo')).toMatchObject([{ status: 'ok', version: '1' }]);
    expect(loaded.has('1')).toBe(true);
    // The version directories gone: the model leaves, as documented.
    await worker.applySnapshot(snapshotOf());
    await until(() => !loaded.has('1'), 2000, 'version 1 unloaded once the model has no version left');
  });
});

describe('a version removed and copied in again, with new bytes, while its old load still drains', () => {
  it('is not put back with the old bytes: the old load drains and is unloaded, then the new file is loaded and served', async () => {
    const base = controlledDevice();
    const loads: string[] = [];
    const device: DeviceLike = {
      ...base.device,
      loadModel: async (path, opts) => {
        loads.push(path.split('/').at(-2) as string);
        return base.device.loadModel(path, opts);
      },
    };
    const lanes = new ModelLanes(device, createLogger({ level: 'silent' }), parseFleetConfig({ devices: { count: 1, backend: 'sim' } }));
    /** The repository with `versions` on disk, the newest served, version 2's file stamped `stamp2`. */
    const repoWith = (versions: string[], stamp2: string) => {
      const snap = snapshotOf(...versions);
      const m = snap.models.get(MODEL)!;
      const all = m.versions.map((v) => ({ ...v, artifactStamp: v.version === '2' ? stamp2 : '1:1:1' }));
      return { ...snap, models: new Map([[MODEL, { ...m, versions: all, served: all.slice(-1) }]]) };
    };
    const current = (): ReturnType<Lane<unknown>['current']> => {
      const lane = lanes.laneFor(MODEL, undefined);
      if (!lane.ok) throw lane.error;
      return lane.lane.current();
    };
    await lanes.apply(repoWith(['1', '2'], '20:5:1'));
    const old2 = current();
    expect(old2.version).toBe('2');
    // A batch is on the device on version 2 (as BatchRunner counts it) when 2 is removed: a rollback to 1.
    old2.inflight++;
    await lanes.apply(repoWith(['1'], '20:5:1'), { reload: true });
    expect(current().version).toBe('1');
    expect(old2.retiring).toBe(true);
    // A fixed build copied in as 2 again (a new inode) before that batch ends.
    const fixed = repoWith(['1', '2'], '21:6:2');
    await lanes.apply(fixed, { reload: true });
    expect(current() === old2, 'the old bytes of version 2 serve again').toBe(false);
    // The batch ends: the old load goes, and the next poll loads the new file.
    old2.inflight--;
    await lanes.retireIfIdle(old2);
    expect(lanes.hasRetryableFailures(fixed)).toBe(true);
    await lanes.apply(fixed, { reload: true });
    expect(current().version).toBe('2');
    expect(current() === old2).toBe(false);
    expect(loads).toEqual(['2', '1', '2']);
  });
});

describe('the log of a version that stops being served', () => {
  it('tells a version superseded by a newer one (still on disk) from one removed from disk', async () => {
    h = await startWorker(snapshotOf('1'));
    const { worker, lines, loaded } = h;
    // Version 2 copied in beside 1: the policy (latest) serves 2; 1 is still on disk.
    const both = snapshotOf('1', '2');
    const m = both.models.get(MODEL)!;
    const v2 = m.versions.filter((v) => v.version === '2');
    await worker.applySnapshot({ ...both, models: new Map([[MODEL, { ...m, served: v2 }]]) });
    await until(() => !loaded.has('1'), 2000, 'version 1 unloaded once drained');
    const superseded = lines.find((l) => l.version === '1' && String(l.msg).includes('draining'));
    expect(superseded?.msg).toBe('version superseded; draining');
    expect(superseded).toMatchObject({ model: MODEL, by: '2', onDisk: true });
    // Then 2 removed from disk for 3.
    await worker.applySnapshot(snapshotOf('3'));
    await until(() => !loaded.has('2'), 2000, 'version 2 unloaded once drained');
    expect(lines.find((l) => l.version === '2' && String(l.msg).includes('draining'))).toMatchObject({ msg: 'version removed; draining', onDisk: false });
  });
});
