import type { Stats } from 'node:fs';
import { basename, dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { modelConfigFromYaml } from '../contracts/config-loader.ts';
import type { ModelConfig } from '../contracts/model-config.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { entriesOf, existsAt, linkOf, runAsync, runSync, statOf, textOf, unlessAbsent, type FsSteps, type RepositoryFs } from './repository-fs.ts';

/**
 * The model repository on disk (DESIGN §6):
 *   <dir>/<name>/config.yaml, <dir>/<name>/<version>/model.onnx (simulator) | model.om (NPU)
 * Scanning is pure file reading, blocking (scanRepository, for one-shot commands) or not
 * (scanRepositoryAsync, for a worker's poll: repository-poll.ts), which diffs snapshots.
 */
export type ArtifactKind = 'onnx' | 'om';

export interface ModelVersion {
  readonly model: string;
  readonly version: string;
  readonly artifactPath: string;
  /** mtime of the artifact; a version is "settled" once it stops changing. */
  readonly modifiedAt: number;
  /**
   * The artifact's identity (inode, size, mtime): a different one under the same version means the
   * file was replaced in place (absent: unknown, never reported as replaced).
   */
  readonly artifactStamp?: string;
}

export interface RepositoryModel {
  readonly name: string;
  readonly config: ModelConfig;
  /** Every valid version directory, ascending. */
  readonly versions: readonly ModelVersion[];
  /** Versions the version policy serves, ascending; the last is the default. */
  readonly served: readonly ModelVersion[];
}

export interface RepositoryProblem {
  readonly path: string;
  readonly message: string;
}

export interface RepositorySnapshot {
  readonly dir: string;
  readonly models: ReadonlyMap<string, RepositoryModel>;
  readonly problems: readonly RepositoryProblem[];
  /**
   * Model directories without their config.yaml and version directories without their model file,
   * with the directory's mtime: one just made may be a copy under way (mkdir, then cp), which the
   * start-up scan waits for.
   */
  readonly incomplete?: readonly { readonly path: string; readonly changedAt: number }[];
}

export interface ScanOptions {
  /** Which artifact the backend loads: model.onnx for the simulator, model.om for CANN. */
  artifact: ArtifactKind;
  /** Ignore artifacts modified less than this long ago (still being copied in). */
  settleMs?: number;
  /**
   * The poll's previous snapshot: a version it had whose file is being rewritten in place (or just
   * touched) keeps its entry there until the file settles; skipped, it would look removed, and a
   * worker would unload a model it serves for the length of a copy.
   */
  previous?: RepositorySnapshot;
  nowMs?: number;
  /** Serve only these model names. */
  only?: readonly string[] | undefined;
  /**
   * Parsed config.yaml files kept between scans of a poll loop: a file whose inode, mtime, ctime
   * and size are unchanged is not read and validated again (ctime moves on every write, even one
   * that restores the mtime) (a scan a second per worker would otherwise parse
   * every model's YAML, which adds up with many models). A model whose config.yaml turns invalid
   * keeps its last valid config (the problem is still reported).
   */
  configCache?: ConfigCache;
}

/**
 * See ScanOptions.configCache; create one per poll loop with `new Map()`. `lastGood` is the last
 * valid parse of the file: a running worker keeps serving the model with it while an edit is broken.
 */
export type ConfigCache = Map<string, { readonly stamp: string; readonly parsed: ModelConfig | Error; readonly lastGood: ModelConfig | undefined }>;

function* loadNamedConfig(path: string, name: string): FsSteps<ModelConfig | Error> {
  let text: string;
  try {
    text = yield* textOf(path);
  } catch (cause) {
    return new FleetError('INVALID_CONFIG', `cannot read model config ${path}: ${(cause as Error).message}`, { cause });
  }
  try {
    const config = modelConfigFromYaml(text, path);
    if (config.name !== name) throw new FleetError('INVALID_CONFIG', `name "${config.name}" must equal its directory name "${name}"`);
    return config;
  } catch (err) {
    return err as Error;
  }
}

/** The model's config, or the reason it has none; with a cache, the last valid one stands in for a broken file. */
function* readConfig(path: string, name: string, cache: ConfigCache | undefined): FsSteps<{ config: ModelConfig | undefined; error: Error | undefined }> {
  if (cache === undefined) {
    const parsed = yield* loadNamedConfig(path, name);
    return parsed instanceof Error ? { config: undefined, error: parsed } : { config: parsed, error: undefined };
  }
  const st = yield* statOf(path);
  const stamp = `${st.ino}:${st.mtimeMs}:${st.ctimeMs}:${st.size}`;
  let hit = cache.get(path);
  if (hit === undefined || hit.stamp !== stamp) {
    const parsed = yield* loadNamedConfig(path, name);
    hit = { stamp, parsed, lastGood: parsed instanceof Error ? hit?.lastGood : parsed };
    cache.set(path, hit);
  }
  return hit.parsed instanceof Error ? { config: hit.lastGood, error: hit.parsed } : { config: hit.parsed, error: undefined };
}

/**
 * An entry's stat, following links, or a problem message: a dangling symlink (a release link left
 * pointing at a removed directory) or an entry removed during the scan must not fail the scan of
 * every other model, which would stop all reloads while it lasts.
 */
function* statEntry(path: string, root: string): FsSteps<Stats | string> {
  try {
    return yield* statOf(path);
  } catch (err) {
    unlessAbsent(path, err);
    const target = yield* linkTarget(path);
    if (target !== undefined) {
      return `is a symlink to ${target}${outside(root, dirname(path), target) ? ' (outside the repository)' : ''}, which does not exist: point it at an existing directory or remove it`;
    }
    const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    return `cannot read it (${code}: a symlink to nothing, or removed while scanning); point it at an existing directory or remove it`;
  }
}

/** Whether a link in `from` to `target` leads out of the repository `root`. */
function outside(root: string, from: string, target: string): boolean {
  const rel = relative(root, resolve(from, target));
  return rel === '..' || rel.startsWith('../') || isAbsolute(rel);
}

/** Where a symlink at `path` points, or undefined for no symlink there. */
function* linkTarget(path: string): FsSteps<string | undefined> {
  try {
    return yield* linkOf(path);
  } catch {
    return undefined;
  }
}

/** Git LFS pointer files are about 130 bytes; no real model is this small. */
const LFS_POINTER_MAX_BYTES = 1024;

/**
 * A model kept in Git LFS and cloned without `git lfs pull` is a short text pointer: its load
 * fails as a malformed model, which does not say what to do.
 */
function* isLfsPointer(path: string): FsSteps<boolean> {
  try {
    return (yield* textOf(path)).startsWith('version https://git-lfs.github.com/spec/');
  } catch {
    return false;
  }
}

// Up to 15 digits, so versions order exactly as numbers: a Unix-time name (TensorFlow's exports)
// or a YYYYMMDDhhmmss stamp fits.
const VERSION_DIR = /^[1-9][0-9]{0,14}$/;

/** Whether a symlink in `modelDir` pointing at `target` points at a version directory beside it. */
function isSiblingVersion(modelDir: string, target: string): boolean {
  const resolved = resolve(modelDir, target);
  return dirname(resolved) === modelDir && VERSION_DIR.test(basename(resolved));
}

function applyPolicy(config: ModelConfig, versions: readonly ModelVersion[]): ModelVersion[] {
  if (config.versionPolicy.kind === 'latest') return versions.slice(-config.versionPolicy.count);
  const wanted = new Set(config.versionPolicy.versions.map(String));
  return versions.filter((v) => wanted.has(v.version));
}

/** Scans with blocking file reads: for one-shot commands (models validate, publish), not a serving worker. */
export function scanRepository(dir: string, options: ScanOptions): RepositorySnapshot {
  return runSync(scanSteps(dir, options));
}

/**
 * Scans through fs.promises (or `fs`): the event loop keeps turning while a read waits on a slow
 * or hung file system. The scan reads one file at a time.
 */
export function scanRepositoryAsync(dir: string, options: ScanOptions & { fs?: RepositoryFs }): Promise<RepositorySnapshot> {
  return runAsync(scanSteps(dir, options), options.fs);
}

function* scanSteps(dirIn: string, options: ScanOptions): FsSteps<RepositorySnapshot> {
  const dir = resolve(dirIn);
  const problems: RepositoryProblem[] = [];
  const incomplete: Array<{ path: string; changedAt: number }> = [];
  const models = new Map<string, RepositoryModel>();
  let dirStat: Stats | undefined;
  let why = '';
  try {
    dirStat = yield* statOf(dir);
  } catch (err) {
    why = ` (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`;
  }
  if (dirStat === undefined || !dirStat.isDirectory()) {
    // Gone under a running worker (an unmounted volume, a release link removed), it is an outage
    // the poll rides out, not a mistake in the fleet config, which is what it is at start.
    if (options.previous !== undefined && options.previous.models.size > 0) {
      throw new FleetError('SERVICE_UNAVAILABLE', `model repository ${dir} cannot be read${why || ' (not a directory)'}; serving on with the loaded versions until it can`, { details: { dir } });
    }
    throw new FleetError('INVALID_CONFIG', `model repository ${dir} is not a directory${why}; set modelRepository in the fleet config`);
  }
  const nowMs = options.nowMs ?? Date.now();
  const artifactFile = options.artifact === 'onnx' ? 'model.onnx' : 'model.om';
  const names = (yield* entriesOf(dir)).filter((name) => !name.startsWith('.')).sort();
  // An unmounted NFS or CSI volume leaves its mount point, an empty directory: taken as it reads,
  // every model would be unloaded and every request refused until the mount returns. A worker
  // cannot start on an empty repository either, so a poll fails (the worker serves on) instead.
  if (names.length === 0 && options.previous !== undefined && options.previous.models.size > 0) {
    throw new FleetError('SERVICE_UNAVAILABLE', `model repository ${dir} is empty now (an unmounted volume?); serving on with the loaded versions until models are back in it`, {
      details: { dir },
    });
  }
  for (const name of names) {
    const modelDir = join(dir, name);
    const modelStat = yield* statEntry(modelDir, dir);
    if (typeof modelStat === 'string') {
      problems.push({ path: modelDir, message: modelStat });
      continue;
    }
    if (!modelStat.isDirectory()) continue;
    if (options.only && !options.only.includes(name)) continue;
    const configPath = join(modelDir, 'config.yaml');
    if (!(yield* existsAt(configPath))) {
      // An editor saving it may rename the old file away before writing the new one (vim's and
      // emacs's backups): a model the poll had stays as it was while its directory just changed,
      // or it would be unloaded, and its requests refused, for the length of a save.
      const had = options.previous?.models.get(name);
      if (had !== undefined && options.settleMs !== undefined && changedJustNow(modelStat.mtimeMs, nowMs, options.settleMs)) {
        models.set(name, had);
        continue;
      }
      incomplete.push({ path: modelDir, changedAt: modelStat.mtimeMs });
      problems.push({ path: modelDir, message: 'missing config.yaml (every model directory needs one)' });
      continue;
    }
    const { config, error } = yield* readConfig(configPath, name, options.configCache);
    if (error !== undefined) {
      // A running worker must not drop a model over an edit gone wrong: it keeps the config it had.
      const keeping = config === undefined ? '' : '; still serving the model with the last valid config.yaml until it is fixed';
      problems.push({ path: configPath, message: `${error.message}${keeping}` });
    }
    if (config === undefined) continue;
    const versions: ModelVersion[] = [];
    const entries = yield* entriesOf(modelDir);
    for (const entry of entries) {
      // Hidden entries are staging copies renamed into place when complete (mv .5.tmp 5), rsync
      // partials, tool droppings: not versions, and no problem either.
      if (entry.startsWith('.')) continue;
      const versionDir = join(modelDir, entry);
      const versionStat = yield* statEntry(versionDir, dir);
      if (typeof versionStat === 'string') {
        problems.push({ path: versionDir, message: versionStat });
        continue;
      }
      if (!versionStat.isDirectory()) {
        // Other files (notes, a README) are no concern; one named as a version is a copy gone wrong
        // (cp model.onnx m/2 with no directory 2), and that version would silently not be served.
        if (VERSION_DIR.test(entry)) {
          problems.push({ path: versionDir, message: `is a file, but a version is a directory holding ${artifactFile}: make it one (mv ${versionDir} ${versionDir}.tmp && mkdir ${versionDir} && mv ${versionDir}.tmp ${join(versionDir, artifactFile)})` });
        }
        continue;
      }
      if (!VERSION_DIR.test(entry)) {
        // A release pointer (current -> 3, stable -> 2) names a version served or not under its
        // own number: not a version, and no mistake either.
        const target = yield* linkTarget(versionDir);
        if (target !== undefined && isSiblingVersion(modelDir, target)) continue;
        if (target !== undefined && outside(dir, modelDir, target)) {
          problems.push({
            path: versionDir,
            message:
              `is a symlink to ${target}, outside the repository: a release pointer (${entry} -> 3) must name a version directory beside it (ln -sfn 3 ${entry}); ` +
              'copy the version into the model directory under its number instead',
          });
          continue;
        }
        problems.push({ path: versionDir, message: "version directories must be positive integers without leading zeros, at most 15 digits (1, 2, ..., 10, or a time stamp like 1764500000): rename it, or move it out (or prefix it with '.' to hide it)" });
        continue;
      }
      const artifactPath = join(versionDir, artifactFile);
      const artifactStat = yield* statEntry(artifactPath, dir);
      if (typeof artifactStat === 'string') {
        incomplete.push({ path: versionDir, changedAt: versionStat.mtimeMs });
        // Just created or changed (a copy in progress, mkdir then cp): its file may still come. A
        // version the poll had keeps its entry, as for a rewrite below: replaced by removing the
        // file first (install, cp --remove-destination, rm; cp), it would look removed and be unloaded.
        if (options.settleMs !== undefined && changedJustNow(versionStat.mtimeMs, nowMs, options.settleMs)) {
          const had = options.previous?.models.get(name)?.versions.find((v) => v.version === entry);
          if (had !== undefined) versions.push(had);
          continue;
        }
        const target = yield* linkTarget(artifactPath);
        problems.push({
          path: versionDir,
          message:
            target === undefined
              ? `missing ${artifactFile} (needed by the ${options.artifact === 'onnx' ? 'simulator' : 'NPU'} backend)`
              : `${artifactFile} is a symlink to ${target}, which does not exist: point it at the model file`,
        });
        continue;
      }
      const modifiedAt = artifactStat.mtimeMs;
      if (options.settleMs !== undefined && changedJustNow(modifiedAt, nowMs, options.settleMs)) {
        const had = options.previous?.models.get(name)?.versions.find((v) => v.version === entry);
        if (had !== undefined) versions.push(had);
        continue;
      }
      // Still listed: a load then fails naming the file, and a served version keeps its loaded bytes.
      if (artifactStat.size === 0) problems.push({ path: versionDir, message: `${artifactFile} is empty (0 bytes): copy the model file in again` });
      else if (artifactStat.size <= LFS_POINTER_MAX_BYTES && (yield* isLfsPointer(artifactPath))) {
        problems.push({ path: versionDir, message: `${artifactFile} is a Git LFS pointer (${artifactStat.size} bytes), not the model: run git lfs pull in the repository, or copy the real file in` });
      }
      versions.push({ model: name, version: entry, artifactPath, modifiedAt, artifactStamp: `${artifactStat.ino}:${artifactStat.size}:${modifiedAt}` });
    }
    versions.sort((a, b) => Number(a.version) - Number(b.version));
    const served = applyPolicy(config, versions);
    if (served.length === 0) {
      const keeping = versions.length > 0 ? '; fix versionPolicy (running workers keep serving the versions they have until then)' : '';
      problems.push({ path: modelDir, message: `no servable version (policy ${JSON.stringify(config.versionPolicy)}, found [${versions.map((v) => v.version).join(', ')}])${keeping}` });
    } else if (config.versionPolicy.kind === 'specific') {
      // A typo in the list (20 for 2) would otherwise pass unnoticed: fewer versions served, requests
      // pinned to it refused. A directory there but not servable (still being copied in, no model
      // file) is not named here: it has its own problem, or none yet.
      const absent = config.versionPolicy.versions.map(String).filter((v) => !entries.includes(v));
      if (absent.length > 0) {
        problems.push({
          path: configPath,
          message: `versionPolicy.versions lists ${absent.join(', ')}, but ${modelDir} has no such version directory (found [${versions.map((v) => v.version).join(', ')}]): deploy it, or take it off the list`,
        });
      }
    }
    models.set(name, { name, config, versions, served });
  }
  // Configs of models removed since the last scan leave the cache (one kept above keeps its own).
  if (options.configCache !== undefined) {
    for (const path of options.configCache.keys()) {
      if (!models.has(basename(dirname(path))) && !(yield* existsAt(path))) options.configCache.delete(path);
    }
  }
  return { dir, models, problems, incomplete };
}

/**
 * Whether a file (or directory) changed within `settleMs`, so a copy into it may be going on. A
 * write in progress stamps the time of now; an mtime further in the future than `settleMs` comes
 * from another clock (a tar or rsync from a host whose clock is ahead), not from a copy going on,
 * and waiting for the clock to pass it would hold the version back for as long as the skew.
 */
export function changedJustNow(mtimeMs: number, nowMs: number, settleMs: number): boolean {
  return nowMs - mtimeMs < settleMs && mtimeMs - nowMs <= settleMs;
}

export interface SettleWait {
  /** A served file changed less than this long ago may still be being copied in. */
  readonly settleMs: number;
  /** Waiting ends after this long, taking the files as they are (one that never stops changing). */
  readonly maxWaitMs: number;
  /** Told, once per wait, how long the scan waits for files to settle. */
  readonly onWait?: (waitMs: number, paths: readonly string[]) => void;
}

/**
 * The start-up scan. Unlike a poll's, it cannot skip a version whose file is still changing (the
 * models served at start would change with the timing), but loading it would load half a file:
 * the load fails, the start with it, and the supervisor restarts the worker in a loop until the
 * copy ends (or, for a format that half-parses, garbage is served). So it waits until every served
 * file, and every model or version directory still without its file, is settleMs old, rescanning
 * (a copy may add files), for at most maxWaitMs. A worker started right after a copy finished
 * waits at most settleMs.
 */
export async function scanRepositorySettled(dir: string, options: Omit<ScanOptions, 'settleMs' | 'previous' | 'nowMs'>, wait: SettleWait): Promise<RepositorySnapshot> {
  const startedAt = Date.now();
  for (;;) {
    const snapshot = await scanRepositoryAsync(dir, options);
    const nowMs = Date.now();
    // A model or version directory still without its file counts too: skipped, its model (maybe
    // new with it) would not be served, nor subscribed to, until the worker restarts.
    const young = [
      ...[...snapshot.models.values()].flatMap((m) => m.served).map((v) => ({ path: v.artifactPath, changedAt: v.modifiedAt })),
      ...(snapshot.incomplete ?? []),
    ].filter((f) => changedJustNow(f.changedAt, nowMs, wait.settleMs));
    const left = wait.maxWaitMs - (nowMs - startedAt);
    if (young.length === 0 || left <= 0) return snapshot;
    const waitMs = Math.min(left, Math.max(...young.map((f) => wait.settleMs - (nowMs - f.changedAt))) + 10);
    wait.onWait?.(waitMs, young.map((f) => f.path));
    await new Promise((r) => setTimeout(r, waitMs));
  }
}

export interface VersionDiff {
  readonly added: readonly ModelVersion[];
  readonly removed: readonly ModelVersion[];
  /** Models in both snapshots whose config.yaml now parses to something different. */
  readonly configChanged: readonly string[];
  /**
   * Served versions in both snapshots whose model file was replaced in place (new bytes under the
   * same version). Running workers keep what they loaded; versions are immutable once served.
   */
  readonly replaced: readonly ModelVersion[];
}

const key = (v: ModelVersion): string => `${v.model}@${v.version}`;

/** Served versions that appeared or disappeared between two snapshots, and changed configs. */
export function diffServed(before: RepositorySnapshot | undefined, after: RepositorySnapshot): VersionDiff {
  const old = new Map<string, ModelVersion>();
  for (const m of before?.models.values() ?? []) for (const v of m.served) old.set(key(v), v);
  const now = new Map<string, ModelVersion>();
  for (const m of after.models.values()) for (const v of m.served) now.set(key(v), v);
  const configChanged: string[] = [];
  for (const m of after.models.values()) {
    const was = before?.models.get(m.name);
    if (was !== undefined && JSON.stringify(was.config) !== JSON.stringify(m.config)) configChanged.push(m.name);
  }
  const replaced = [...now.entries()].filter(([k, v]) => {
    const was = old.get(k)?.artifactStamp;
    return was !== undefined && v.artifactStamp !== undefined && was !== v.artifactStamp;
  });
  return {
    added: [...now.entries()].filter(([k]) => !old.has(k)).map(([, v]) => v),
    removed: [...old.entries()].filter(([k]) => !now.has(k)).map(([, v]) => v),
    configChanged,
    replaced: replaced.map(([, v]) => v),
  };
}

/** Problems `after` has that `before` did not: a poll loop logs each once, not every second. */
export function newProblems(before: RepositorySnapshot | undefined, after: RepositorySnapshot): RepositoryProblem[] {
  const seen = new Set((before?.problems ?? []).map((p) => `${p.path}\0${p.message}`));
  return after.problems.filter((p) => !seen.has(`${p.path}\0${p.message}`));
}
