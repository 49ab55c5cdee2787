import type { FleetConfig } from '../contracts/fleet-config.ts';
import { effectiveGears, type ModelConfig } from '../contracts/model-config.ts';
import { FleetError } from '../errors/fleet-error.ts';
import type { Logger } from '../observability/logger.ts';
import { BatchScheduler } from '../scheduler/batch-scheduler.ts';
import type { SchedulerOptionsInput } from '../scheduler/scheduler-options.ts';
import type { SchedulerRequest } from '../scheduler/scheduler-types.ts';
import type { ModelSubscription } from '../transport/transport.ts';
import { loadChecked, type DeviceLike, type ExecutableModel } from './load-checked.ts';
import { fieldPaths, liveSchedulerOptionsFor, reloadModelConfig } from './model-config-reload.ts';
import { modelConfigMismatches } from './model-io-check.ts';
import type { ModelVersion, RepositoryModel, RepositorySnapshot } from './model-repository.ts';
import { WAKE_MARGIN_MS } from './timer-delay.ts';

export interface LoadedVersion {
  readonly model: string;
  readonly version: string;
  readonly executable: ExecutableModel;
  /** The file as it was loaded (fileIdentity), when known. */
  readonly identity?: string;
  /** Batches on the device right now; a retiring version is unloaded when this reaches 0. */
  inflight: number;
  retiring: boolean;
}

export interface Lane<P> {
  readonly key: string;
  /** The model's running config: a reload changes its live fields (model-config-reload.ts). */
  readonly config: ModelConfig;
  readonly scheduler: BatchScheduler<P>;
  /** Pinned version, or undefined for the default lane (follows the newest served version). */
  readonly pinned: string | undefined;
  /** The version a batch dispatched now runs on: resolved at dispatch, so a reload switches atomically. */
  current(): LoadedVersion;
}

export interface ApplyOptions {
  /** A hot reload (a poll), not the worker's start. */
  readonly reload?: boolean;
  /** A version failed to load (npu_fleet_model_load_failures_total). */
  readonly onLoadFailure?: (model: string) => void;
}

/** Maps the model config onto the pure scheduler's options. */
export function schedulerOptionsFor(config: ModelConfig): SchedulerOptionsInput {
  return {
    maxBatchSize: config.maxBatchSize,
    gears: effectiveGears(config),
    priorityLevels: config.priorityLevels,
    buckets: config.buckets ? [...config.buckets.bounds] : [],
    deadlineMarginMs: WAKE_MARGIN_MS,
    ...liveSchedulerOptionsFor(config),
  };
}

/**
 * A version's file as a failed load saw it: inode, size and mtime, so a file removed and copied in
 * again with its mtime kept (cp -p, rsync -a, tar) counts as changed; the mtime alone when unknown.
 */
const fileIdentity = (v: ModelVersion): string => v.artifactStamp ?? `mtime ${v.modifiedAt}`;

/**
 * A load that failed for a passing reason (FleetError.retriable: device out of memory, a device
 * error) is tried again at most this often while nothing on the device was unloaded: memory may be
 * given back by another process sharing the device.
 */
export const RETRIABLE_LOAD_RETRY_MS = 5 * 60_000;

interface FailedLoad {
  /** The file as the failed load saw it (fileIdentity). */
  readonly identity: string;
  /** The failure may pass with the same file (FleetError.retriable), e.g. DEVICE_OUT_OF_MEMORY. */
  readonly retriable: boolean;
  /** ModelLanes.unloads when it failed: an unload since has given device memory back. */
  readonly unloads: number;
  readonly atMs: number;
}

interface ModelEntry<P> {
  config: ModelConfig;
  versions: Map<string, LoadedVersion>;
  defaultVersion: string;
  lanes: Map<string, Lane<P>>;
}

/**
 * Loaded model versions on one device and their scheduler lanes. Hot reload (DESIGN §6): a new
 * version is loaded first, then `defaultVersion` flips (batches formed after that run on it),
 * batches in flight finish on the old one, which is unloaded once idle.
 */
export class ModelLanes<P = unknown> {
  private readonly models = new Map<string, ModelEntry<P>>();
  private rr = 0;

  constructor(
    private readonly device: DeviceLike,
    private readonly log: Logger,
    private readonly _fleet: FleetConfig,
  ) {}

  subscriptions(): ModelSubscription[] {
    return [...this.models.values()].map((m) => ({ model: m.config.name, priorityLevels: m.config.priorityLevels }));
  }

  /**
   * Versions that failed to load, by `model@version`: not retried (a load is heavy on a real NPU)
   * until the file changes, or, for a failure that may pass (out of device memory: the version
   * being replaced still loaded beside it), once a version on this device was unloaded since or
   * RETRIABLE_LOAD_RETRY_MS passed (see retryDue).
   */
  private readonly failedLoads = new Map<string, FailedLoad>();

  /** Versions unloaded on this device so far (memory given back since a failed load). */
  private unloads = 0;

  /**
   * Models that had a version loaded at some point (subscribed when served at start): the config
   * they run with, which outlives their entry (the subscriptions do), and the config.yaml it was
   * last reconciled with.
   */
  private readonly servedConfigs = new Map<string, { config: ModelConfig; file: ModelConfig }>();

  /** Models that appeared after start, reported once as waiting for a restart. */
  private readonly reportedNew = new Set<string>();

  /**
   * Applies a repository snapshot; returns names of models that were not served before (during a
   * hot reload, models new in the repository: reported once, not loaded, served after a restart).
   * A version that fails to load is reported once and skipped, and tried again when its artifact
   * changes: during a hot reload the model keeps serving what it has (an older version is retired
   * only once a served one is loaded); at start, when no version the policy serves loads, an older
   * version on disk serves (loadFallback), and when none loads at all the worker fails.
   */
  async apply(snapshot: RepositorySnapshot, options: ApplyOptions = {}): Promise<string[]> {
    const added: string[] = [];
    for (const repoModel of snapshot.models.values()) {
      if (repoModel.served.length === 0) continue;
      if (options.reload === true && !this.servedConfigs.has(repoModel.name)) {
        // The transport subscribes at start only: loaded now, the model would hold device memory
        // (that a served model's next version may need) for requests that never come.
        if (!this.reportedNew.has(repoModel.name)) {
          this.reportedNew.add(repoModel.name);
          added.push(repoModel.name);
        }
        continue;
      }
      const config = this.reconcileConfig(repoModel);
      let entry = this.models.get(repoModel.name);
      const failures: unknown[] = [];
      for (const v of repoModel.served) {
        // Each load below awaits; batches completing meanwhile may unload versions (see after load).
        entry = this.models.get(repoModel.name);
        const have = entry?.versions.get(v.version);
        if (have?.retiring === true && have.identity !== undefined && have.identity !== fileIdentity(v)) {
          // Removed, then copied in again with other bytes while the old load drains: put back, the
          // old bytes would serve on in silence (no file changes in place to warn about) while
          // workers started later load the new ones. The new file loads once the old load is gone.
          this.log.info({ model: v.model, version: v.version }, 'version copied in again with a new file while its old load drains; loading the new file once that is unloaded');
          continue;
        }
        if (have !== undefined) {
          // Put back while it still drains (a rollback, a config.yaml that failed to parse for a
          // poll): it serves again; left retiring, it would be unloaded and never loaded again.
          if (have.retiring) {
            have.retiring = false;
            this.log.info({ model: v.model, version: v.version }, 'version served again; no longer draining');
          }
          continue;
        }
        if (options.reload === true && !this.retryDue(v)) continue;
        const failure = await this.loadVersion(repoModel, v, config, added, options);
        if (failure !== undefined) failures.push(failure);
      }
      if (options.reload !== true && failures.length > 0 && !this.models.has(repoModel.name)) {
        await this.loadFallback(repoModel, config, added, failures, options);
      }
      entry = this.models.get(repoModel.name);
      if (!entry) continue;
      const current = entry;
      const newest = [...repoModel.served].reverse().find((v) => current.versions.get(v.version)?.retiring === false)?.version;
      // Nothing served is loaded (the new version failed): keep serving what is there.
      if (newest === undefined) continue;
      if (newest !== entry.defaultVersion) {
        this.log.info({ model: repoModel.name, from: entry.defaultVersion, to: newest }, 'switching new batches to version');
        entry.defaultVersion = newest;
      }
      const served = new Set(repoModel.served.map((v) => v.version));
      const onDisk = new Set(repoModel.versions.map((v) => v.version));
      for (const loaded of entry.versions.values()) {
        if (!served.has(loaded.version) && !loaded.retiring) {
          loaded.retiring = true;
          // A version the policy no longer selects but still on disk was superseded, not removed:
          // "removed" sent an operator looking for who deleted a directory that is still there.
          const kept = onDisk.has(loaded.version);
          this.log.info(
            { model: loaded.model, version: loaded.version, onDisk: kept, ...(kept ? { by: newest } : {}) },
            kept ? 'version superseded; draining' : 'version removed; draining',
          );
          await this.retireIfIdle(loaded);
        }
      }
    }
    for (const [name, entry] of this.models) {
      const repoModel = snapshot.models.get(name);
      // Versions on disk that the versionPolicy selects none of: an edit gone wrong (versions: [20]
      // for [2]), which the scan reports; like an invalid config.yaml it changes nothing here.
      if (repoModel !== undefined && repoModel.served.length === 0 && repoModel.versions.length > 0) continue;
      if (!repoModel?.served.length) {
        for (const loaded of entry.versions.values()) {
          if (!loaded.retiring) {
            loaded.retiring = true;
            await this.retireIfIdle(loaded);
          }
        }
      }
    }
    return added;
  }

  /**
   * Loads `v` into its model's entry. A failure is logged, counted and remembered (tried again
   * when the file changes); returned at start, where the caller decides whether the worker can
   * serve the model at all.
   */
  private async loadVersion(repoModel: RepositoryModel, v: ModelVersion, config: ModelConfig, added: string[], options: ApplyOptions): Promise<unknown> {
    const key = `${v.model}@${v.version}`;
    const started = Date.now();
    let executable: ExecutableModel;
    try {
      // Checked against the running config: a new version made for new tensors waits for a restart.
      executable = await loadChecked(this.device, v.artifactPath, config, `${v.model} version ${v.version}`);
    } catch (err) {
      const retriable = FleetError.is(err) && err.retriable;
      this.failedLoads.set(key, { identity: fileIdentity(v), retriable, unloads: this.unloads, atMs: Date.now() });
      options.onLoadFailure?.(v.model);
      const serving = this.models.get(repoModel.name)?.defaultVersion ?? null;
      // The message stays one string (alerts and searches key on it); when else it is retried is a field.
      const alsoRetried = retriable ? `once a version on this device is unloaded, or after ${RETRIABLE_LOAD_RETRY_MS / 60_000} min` : undefined;
      this.log.error(
        { err, model: v.model, version: v.version, path: v.artifactPath, serving, ...(alsoRetried === undefined ? {} : { alsoRetried }) },
        options.reload === true
          ? 'model version failed to load; keeping the versions already served (tried again when the file changes)'
          : 'model version failed to load at start (tried again when the file changes)',
      );
      return err;
    }
    this.failedLoads.delete(key);
    this.log.info({ model: v.model, version: v.version, loadMs: Date.now() - started }, 'model version loaded');
    const loaded: LoadedVersion = { model: v.model, version: v.version, executable, identity: fileIdentity(v), inflight: 0, retiring: false };
    // Read again after the load: the model's last draining version may have been unloaded
    // meanwhile, taking the entry with it; adding to that entry would lose this version.
    let entry = this.models.get(repoModel.name);
    if (!entry) {
      entry = { config, versions: new Map(), defaultVersion: v.version, lanes: new Map() };
      this.models.set(repoModel.name, entry);
      // Only a model never served is new to the transport; one served before is still subscribed.
      if (!this.servedConfigs.has(repoModel.name)) {
        added.push(repoModel.name);
        this.servedConfigs.set(repoModel.name, { config, file: repoModel.config });
      }
    }
    entry.versions.set(v.version, loaded);
    return undefined;
  }

  /**
   * At start no version the policy serves loaded (a bad push, a file for another SoC). A running
   * worker in that state keeps the version it had; a worker started now serves the newest older
   * version on disk that loads, so a restart or a scale-out does not crash-loop on the bad one
   * while the workers that kept running serve on. It is served until a policy version loads
   * (retried when its file changes). None loads: the worker fails with the newest one's error.
   */
  private async loadFallback(repoModel: RepositoryModel, config: ModelConfig, added: string[], failures: unknown[], options: ApplyOptions): Promise<void> {
    const served = new Set(repoModel.served.map((v) => v.version));
    const older = repoModel.versions.filter((v) => !served.has(v.version)).reverse();
    for (const v of older) {
      if ((await this.loadVersion(repoModel, v, config, added, options)) !== undefined) continue;
      this.log.error(
        { model: repoModel.name, failed: repoModel.served.map((f) => f.version), serving: v.version },
        `no version the versionPolicy serves loads; serving version ${v.version} from disk until one does (fix or remove the failing version: models validate --load)`,
      );
      return;
    }
    throw failures.at(-1);
  }

  /**
   * The config `repoModel` runs with here: its config.yaml for a model never served; for one
   * served, the running config with the live fields of a changed config.yaml laid over it, applied
   * to every lane of the model at once (default and pinned), the rest warned about once per change.
   */
  private reconcileConfig(repoModel: RepositoryModel): ModelConfig {
    const known = this.servedConfigs.get(repoModel.name);
    if (known === undefined) return repoModel.config;
    // The scan hands back the same parsed object while the file is unchanged (its config cache).
    if (known.file === repoModel.config || JSON.stringify(known.file) === JSON.stringify(repoModel.config)) return known.config;
    const model = repoModel.name;
    const { config, applied, held } = reloadModelConfig(known.config, repoModel.config);
    const entry = this.models.get(model);
    if (applied.length > 0) {
      // Every lane takes the same options: refused (a valid config cannot be), the first lane throws before any changed.
      const nowMs = Date.now();
      for (const lane of entry?.lanes.values() ?? []) lane.scheduler.reconfigure(liveSchedulerOptionsFor(config), nowMs);
      this.log.info({ model, fields: fieldPaths(applied, known.config, config) }, 'config.yaml changed; applied to the running worker');
    }
    if (held.length > 0) {
      this.log.warn({ model, fields: fieldPaths(held, known.config, repoModel.config) }, 'config.yaml changed in fields a running worker cannot apply; they apply to workers started from now on (restart the workers to apply them)');
      this.warnUnfit(model, repoModel.config, entry);
    }
    if (entry !== undefined) entry.config = config;
    this.servedConfigs.set(model, { config, file: repoModel.config });
    return config;
  }

  /**
   * A held change of the tensors (inputs, outputs) is checked against the model files loaded here
   * now, as loadChecked will check it at the next start: otherwise the restart the warning asks for
   * fails every load, and the operator learns it from a crash loop instead of from this line.
   */
  private warnUnfit(model: string, file: ModelConfig, entry: ModelEntry<P> | undefined): void {
    const unfit = [...(entry?.versions.values() ?? [])]
      .filter((v) => !v.retiring)
      .map((v) => ({ version: v.version, problems: modelConfigMismatches(file, v.executable) }))
      .filter((u) => u.problems.length > 0);
    if (unfit.length === 0) return;
    const versions = unfit.map((u) => u.version);
    const problems = [...new Set(unfit.flatMap((u) => u.problems))];
    this.log.error(
      { model, versions },
      `config.yaml no longer fits the model file this worker loaded (version ${versions.join(', ')}): a restarted worker would refuse it: ${problems.join('; ')}; ` +
        'fix config.yaml before the workers restart (npu-fleet models validate --load); this worker serves on with the config it loaded',
    );
  }

  /**
   * Whether a served version of a model this worker serves is not loaded and is due to be: an
   * earlier load failed and may load now (retryDue), or an old load of it was draining when the
   * version came back with a new file and is gone now. The repository diff shows neither.
   */
  hasRetryableFailures(snapshot: RepositorySnapshot): boolean {
    for (const m of snapshot.models.values()) {
      if (!this.servedConfigs.has(m.name)) continue;
      const loaded = this.models.get(m.name)?.versions;
      for (const v of m.served) {
        if (loaded?.has(v.version) !== true && this.retryDue(v)) return true;
      }
    }
    return false;
  }

  /** Whether `v`, not loaded, is to be loaded now: never tried, or failed but may load now. */
  private retryDue(v: ModelVersion): boolean {
    const failed = this.failedLoads.get(`${v.model}@${v.version}`);
    if (failed === undefined || failed.identity !== fileIdentity(v)) return true;
    return failed.retriable && (this.unloads > failed.unloads || Date.now() - failed.atMs >= RETRIABLE_LOAD_RETRY_MS);
  }

  /**
   * Whether `v` is loaded here from other bytes than its file holds now: a file replaced in place
   * under a loaded version. A version never loaded (its load failed on a half-copied file) is not:
   * its file changing is the copy completing, which retryDue loads.
   */
  loadedFromOtherBytes(v: ModelVersion): boolean {
    const loaded = this.models.get(v.model)?.versions.get(v.version);
    return loaded?.identity !== undefined && loaded.identity !== fileIdentity(v);
  }

  /** Whether this worker has `model` loaded (in any version). */
  serves(model: string): boolean {
    return this.models.has(model);
  }

  laneFor(model: string, version: string | undefined): { ok: true; lane: Lane<P> } | { ok: false; error: FleetError } {
    const entry = this.models.get(model);
    // Missing: its last version is being unloaded (the entry goes once the unload returns); a lane
    // made now would have no version to dispatch on.
    if (!entry || entry.versions.get(entry.defaultVersion)?.retiring !== false) {
      // A model still draining is no longer served: listing it would contradict the refusal.
      const served = [...this.models].filter(([, e]) => e.versions.get(e.defaultVersion)?.retiring === false).map(([name]) => name);
      const why = entry ? 'has no servable version in the model repository any more' : 'is not served by this fleet';
      return { ok: false, error: new FleetError('UNKNOWN_MODEL', `model "${model}" ${why} (served: ${served.join(', ') || 'none'})`) };
    }
    if (version !== undefined) {
      const v = entry.versions.get(version);
      if (!v || v.retiring) {
        const served = [...entry.versions.values()].filter((x) => !x.retiring).map((x) => x.version);
        return { ok: false, error: new FleetError('UNKNOWN_MODEL', `version "${version}" of model "${model}" is not served (served: ${served.join(', ')}); omit version for the default`) };
      }
    }
    const key = version === undefined ? model : `${model}@${version}`;
    let lane = entry.lanes.get(key);
    if (!lane) {
      const scheduler = new BatchScheduler<P>(schedulerOptionsFor(entry.config));
      const pinned = version;
      lane = {
        key,
        get config() {
          return entry.config;
        },
        scheduler,
        pinned,
        current: () => {
          const v = entry.versions.get(pinned ?? entry.defaultVersion);
          if (!v) throw new FleetError('INTERNAL', `version ${pinned ?? entry.defaultVersion} of ${model} vanished`);
          return v;
        },
      };
      entry.lanes.set(key, lane);
    }
    return { ok: true, lane };
  }

  /** The versions each model serves now (loaded, not retiring): the served-versions gauge. */
  servedVersions(): Array<{ model: string; version: string }> {
    return [...this.models].flatMap(([model, e]) => [...e.versions.values()].filter((v) => !v.retiring).map((v) => ({ model, version: v.version })));
  }

  allLanes(): Lane<P>[] {
    return [...this.models.values()].flatMap((m) => [...m.lanes.values()]);
  }

  /** Lanes with queued work, rotated each call so no model starves another. */
  orderedLanes(_nowMs: number): Lane<P>[] {
    const lanes = this.allLanes().filter((l) => l.scheduler.queuedRequests > 0);
    if (lanes.length < 2) return lanes;
    const start = this.rr++ % lanes.length;
    return [...lanes.slice(start), ...lanes.slice(0, start)];
  }

  queuedRequests(): number {
    let n = 0;
    for (const l of this.allLanes()) n += l.scheduler.queuedRequests;
    return n;
  }

  drainQueued(): SchedulerRequest<P>[] {
    return this.allLanes().flatMap((l) => l.scheduler.drain());
  }

  async retireIfIdle(v: LoadedVersion): Promise<void> {
    if (!v.retiring || v.inflight > 0) return;
    const entry = this.models.get(v.model);
    if (!entry || entry.versions.get(v.version) !== v) return;
    const pinnedLane = entry.lanes.get(`${v.model}@${v.version}`);
    if (pinnedLane && pinnedLane.scheduler.queuedRequests > 0) return;
    // A model left the repository: its default lane has no other version to run on, so what it
    // holds runs here first (dropping the lane with the entry would leave those requests unanswered).
    const defaultLane = entry.defaultVersion === v.version ? entry.lanes.get(v.model) : undefined;
    if (defaultLane && defaultLane.scheduler.queuedRequests > 0) return;
    entry.versions.delete(v.version);
    entry.lanes.delete(`${v.model}@${v.version}`);
    try {
      await v.executable.unload();
    } catch (err) {
      // Called where a batch ends (BatchRunner) and by the reload: thrown, it would be an unhandled
      // rejection that takes the worker and every batch it holds down over memory already given up.
      this.log.error({ err, model: v.model, version: v.version }, 'unloading a drained model version failed; its device memory may stay taken until the worker restarts');
      return;
    } finally {
      if (entry.versions.size === 0) this.models.delete(v.model);
    }
    this.unloads++;
    this.log.info({ model: v.model, version: v.version }, 'version unloaded');
  }

  /** Whether some version waits for its lanes to drain (see retireIdle). */
  get retiring(): boolean {
    for (const entry of this.models.values()) for (const v of entry.versions.values()) if (v.retiring) return true;
    return false;
  }

  /**
   * Unloads every retiring version that is idle now. Lanes also empty by expiry, with no batch
   * completing afterwards to call retireIfIdle: without this sweep such a version stays loaded.
   */
  async retireIdle(): Promise<void> {
    const retiring = [...this.models.values()].flatMap((e) => [...e.versions.values()].filter((v) => v.retiring));
    for (const v of retiring) await this.retireIfIdle(v);
  }

  async unloadAll(): Promise<void> {
    for (const entry of this.models.values()) {
      for (const v of entry.versions.values()) await v.executable.unload();
    }
    this.models.clear();
  }
}
