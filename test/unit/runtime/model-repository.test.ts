import { cpSync, mkdirSync, renameSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { diffServed, newProblems, scanRepository, scanRepositoryAsync, scanRepositorySettled, type ConfigCache } from '../../../src/runtime/model-repository.ts';
import { nodeRepositoryFs, type RepositoryFs } from '../../../src/runtime/repository-fs.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const CONFIG = `name: NAME
inputs: [{ name: input, dtype: float32, dims: [-1, 4] }]
outputs: [{ name: y, dtype: float32, dims: [-1, 2] }]
maxBatchSize: 8
`;

function repo(): string {
  const dir = tempDir('npu-fleet-repo-');
  for (const name of ['a', 'b']) {
    mkdirSync(join(dir, name, '1'), { recursive: true });
    writeFileSync(join(dir, name, 'config.yaml'), CONFIG.replace('NAME', name));
    writeFileSync(join(dir, name, '1', 'model.onnx'), 'x');
  }
  return dir;
}

describe('model repository', () => {
  it('scans models and serves the latest version by default', () => {
    const dir = repo();
    mkdirSync(join(dir, 'a', '2'));
    writeFileSync(join(dir, 'a', '2', 'model.onnx'), 'x');
    const snap = scanRepository(dir, { artifact: 'onnx' });
    expect(snap.problems).toEqual([]);
    expect(snap.models.get('a')?.served.map((v) => v.version)).toEqual(['2']);
    expect(snap.models.get('a')?.versions.map((v) => v.version)).toEqual(['1', '2']);
  });

  it('diffs served versions for hot reload (added, then removed)', () => {
    const dir = repo();
    const before = scanRepository(dir, { artifact: 'onnx' });
    cpSync(join(dir, 'a', '1'), join(dir, 'a', '2'), { recursive: true });
    const after = scanRepository(dir, { artifact: 'onnx' });
    const d1 = diffServed(before, after);
    expect(d1.added.map((v) => `${v.model}@${v.version}`)).toEqual(['a@2']);
    expect(d1.removed.map((v) => `${v.model}@${v.version}`)).toEqual(['a@1']);
    rmSync(join(dir, 'a', '2'), { recursive: true });
    const d2 = diffServed(after, scanRepository(dir, { artifact: 'onnx' }));
    expect(d2.added.map((v) => v.version)).toEqual(['1']);
    expect(d2.removed.map((v) => v.version)).toEqual(['2']);
  });

  it('reports models whose config.yaml changed (versions unchanged), and nothing when it did not', () => {
    const dir = repo();
    const before = scanRepository(dir, { artifact: 'onnx' });
    expect(diffServed(before, scanRepository(dir, { artifact: 'onnx' })).configChanged).toEqual([]);
    writeFileSync(join(dir, 'b', 'config.yaml'), CONFIG.replace('NAME', 'b').replace('maxBatchSize: 8', 'maxBatchSize: 16'));
    const d = diffServed(before, scanRepository(dir, { artifact: 'onnx' }));
    expect(d.configChanged).toEqual(['b']);
    expect([...d.added, ...d.removed]).toEqual([]);
  });

  it('with a config cache, reads a config.yaml again only when the file changed, even with its mtime restored', () => {
    const dir = repo();
    const cache: ConfigCache = new Map();
    const path = join(dir, 'b', 'config.yaml');
    const first = scanRepository(dir, { artifact: 'onnx', configCache: cache }).models.get('b')?.config;
    expect(first?.maxBatchSize).toBe(8);
    // Unchanged: the very object parsed before (a fresh parse would be a new one).
    expect(scanRepository(dir, { artifact: 'onnx', configCache: cache }).models.get('b')?.config).toBe(first);
    expect(scanRepository(dir, { artifact: 'onnx' }).models.get('b')?.config).not.toBe(first);
    // Same size, mtime put back: ctime still moved, so it is read again.
    const { mtime } = statSync(path);
    writeFileSync(path, CONFIG.replace('NAME', 'b').replace('maxBatchSize: 8', 'maxBatchSize: 9'));
    utimesSync(path, mtime, mtime);
    expect(scanRepository(dir, { artifact: 'onnx', configCache: cache }).models.get('b')?.config.maxBatchSize).toBe(9);
    // A broken file is a problem on every scan, not only the first; the model keeps its last
    // valid config meanwhile (a worker must not drop a served model over a bad edit).
    writeFileSync(path, 'name: b\nmaxBatchSize: [oops');
    for (let i = 0; i < 2; i++) {
      const snap = scanRepository(dir, { artifact: 'onnx', configCache: cache });
      expect(snap.models.get('b')?.config.maxBatchSize).toBe(9);
      expect(snap.models.get('b')?.served.map((v) => v.version)).toEqual(['1']);
      expect(snap.problems.map((p) => p.path)).toEqual([path]);
      expect(snap.problems[0]?.message).toMatch(/still serving the model with the last valid config\.yaml until it is fixed$/);
    }
    // Without a cache (models validate, a worker starting) there is nothing to fall back on.
    expect(scanRepository(dir, { artifact: 'onnx' }).models.has('b')).toBe(false);
    // A removed model leaves the cache.
    rmSync(join(dir, 'b'), { recursive: true });
    scanRepository(dir, { artifact: 'onnx', configCache: cache });
    expect([...cache.keys()]).toEqual([join(dir, 'a', 'config.yaml')]);
  });

  it('keeps the last valid config of a model through an invalid edit and a wrong name, and reports each new problem once', () => {
    const dir = repo();
    const cache: ConfigCache = new Map();
    const path = join(dir, 'a', 'config.yaml');
    const first = scanRepository(dir, { artifact: 'onnx', configCache: cache });
    writeFileSync(path, CONFIG.replace('NAME', 'renamed'));
    const renamed = scanRepository(dir, { artifact: 'onnx', configCache: cache });
    expect(renamed.models.get('a')?.config).toBe(first.models.get('a')?.config);
    expect(diffServed(first, renamed)).toEqual({ added: [], removed: [], configChanged: [], replaced: [] });
    expect(newProblems(first, renamed).map((p) => `${p.path}: ${p.message}`)).toEqual([
      `${path}: name "renamed" must equal its directory name "a"; still serving the model with the last valid config.yaml until it is fixed`,
    ]);
    expect(newProblems(renamed, scanRepository(dir, { artifact: 'onnx', configCache: cache }))).toEqual([]);
    writeFileSync(path, CONFIG.replace('NAME', 'a'));
    const fixed = scanRepository(dir, { artifact: 'onnx', configCache: cache });
    expect(fixed.problems).toEqual([]);
    expect(diffServed(first, fixed).configChanged).toEqual([]);
  });

  it('a dangling symlink (a flipped release link, an entry removed mid-scan) is a problem of its own, not a failed scan', () => {
    const dir = repo();
    symlinkSync(join(dir, 'releases', 'gone'), join(dir, 'a', '2'));
    symlinkSync(join(dir, 'releases', 'gone-too'), join(dir, 'c'));
    const snap = scanRepository(dir, { artifact: 'onnx' });
    expect(snap.models.get('a')?.served.map((v) => v.version)).toEqual(['1']);
    expect(snap.models.get('b')?.served.map((v) => v.version)).toEqual(['1']);
    const text = snap.problems.map((p) => `${p.path}: ${p.message}`).join('\n');
    expect(text).toMatch(/a\/2: is a symlink to \S*releases\/gone, which does not exist: point it at an existing directory or remove it/);
    expect(text).toMatch(/\/c: is a symlink to \S*releases\/gone-too, which does not exist/);
  });

  it('skips hidden directories in a model directory (a staging copy renamed into place, rsync partials)', () => {
    const dir = repo();
    mkdirSync(join(dir, 'a', '.2.staging'));
    mkdirSync(join(dir, 'a', '.ipynb_checkpoints'));
    const snap = scanRepository(dir, { artifact: 'onnx' });
    expect(snap.problems).toEqual([]);
    expect(snap.models.get('a')?.versions.map((v) => v.version)).toEqual(['1']);
  });

  it('a version directory still being filled (changed within settleMs) is skipped quietly, then reported if it stays empty', () => {
    const dir = repo();
    const nowMs = Date.now();
    const old = new Date(nowMs - 60_000);
    for (const name of ['a', 'b']) utimesSync(join(dir, name, '1', 'model.onnx'), old, old);
    mkdirSync(join(dir, 'a', '2'));
    expect(scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs }).problems).toEqual([]);
    const later = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs: nowMs + 10_000 });
    expect(later.problems.map((p) => `${p.path}: ${p.message}`)).toEqual([`${join(dir, 'a', '2')}: missing model.onnx (needed by the simulator backend)`]);
  });

  it('a served model file rewritten in place keeps its entry until it settles (not removed), then is reported as replaced', () => {
    const dir = repo();
    const nowMs = Date.now();
    const old = new Date(nowMs - 60_000);
    const file = join(dir, 'a', '1', 'model.onnx');
    for (const name of ['a', 'b']) utimesSync(join(dir, name, '1', 'model.onnx'), old, old);
    const first = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs });
    writeFileSync(file, 'new bytes');
    const during = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs, previous: first });
    expect(during.models.get('a')?.served).toEqual(first.models.get('a')?.served);
    expect(diffServed(first, during)).toEqual({ added: [], removed: [], configChanged: [], replaced: [] });
    const settled = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs: nowMs + 10_000, previous: during });
    const diff = diffServed(during, settled);
    expect([...diff.added, ...diff.removed]).toEqual([]);
    expect(diff.replaced.map((v) => `${v.model}@${v.version}`)).toEqual(['a@1']);
    expect(diffServed(settled, scanRepository(dir, { artifact: 'onnx', nowMs: nowMs + 20_000 })).replaced).toEqual([]);
  });

  it('ignores a version still being written (settleMs)', () => {
    const dir = repo();
    const snap = scanRepository(dir, { artifact: 'onnx', settleMs: 60_000 });
    expect(snap.models.get('a')?.served).toEqual([]);
  });

  it('reports each problem with its path', () => {
    const dir = repo();
    writeFileSync(join(dir, 'b', 'config.yaml'), 'name: b\ninputs: []\n');
    mkdirSync(join(dir, 'a', 'v2'));
    mkdirSync(join(dir, 'c'));
    mkdirSync(join(dir, 'a', '3'));
    mkdirSync(join(dir, 'a', '007'));
    const snap = scanRepository(dir, { artifact: 'onnx' });
    const text = snap.problems.map((p) => `${p.path}: ${p.message}`).join('\n');
    expect(text).toMatch(/b\/config.yaml: invalid model config .*inputs/);
    expect(text).toMatch(/a\/v2: version directories must be positive integers without leading zeros, at most 15 digits \(1, 2, \.\.\., 10, or a time stamp like 1764500000\): rename it/);
    expect(text).toMatch(/a\/007: version directories must be positive integers without leading zeros/);
    expect(text).toMatch(/c: missing config.yaml/);
    expect(text).toMatch(/a\/3: missing model.onnx/);
    expect(() => scanRepository(join(dir, 'nope'), { artifact: 'onnx' })).toThrow(/not a directory/);
  });

  it('validates the shipped example repository', () => {
    const snap = scanRepository('examples/models', { artifact: 'onnx' });
    expect(snap.problems).toEqual([]);
    expect([...snap.models.keys()].sort()).toEqual(['mlp-classifier', 'small-cnn', 'text-classifier']);
  });
});

/** Model `a` with version 1 written a minute ago (settled). */
function settledRepo(): string {
  const dir = tempDir('npu-fleet-startup-');
  mkdirSync(join(dir, 'a', '1'), { recursive: true });
  writeFileSync(join(dir, 'a', 'config.yaml'), CONFIG.replace('NAME', 'a'));
  writeFileSync(join(dir, 'a', '1', 'model.onnx'), 'old model');
  const past = new Date(Date.now() - 60_000);
  utimesSync(join(dir, 'a', '1', 'model.onnx'), past, past);
  return dir;
}

describe('the start-up scan of the model repository', () => {
  it('waits for a model file still being copied in, and serves it once complete (not half of it)', async () => {
    const dir = settledRepo();
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
    const dir = settledRepo();
    const t0 = Date.now();
    const settled = await scanRepositorySettled(dir, { artifact: 'onnx' }, { settleMs: 1_000, maxWaitMs: 5_000 });
    // Well under settleMs: no settle wait was taken (a busy CI machine may stall a scan for a while).
    expect(Date.now() - t0).toBeLessThan(500);
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
    const dir = settledRepo();
    mkdirSync(join(dir, 'a', '2'));
    const file = join(dir, 'a', '2', 'model.onnx');
    writeFileSync(file, 'from a skewed host');
    const future = new Date(Date.now() + 3_600_000);
    utimesSync(file, future, future);
    utimesSync(join(dir, 'a', '2'), future, future);
    // A poll's scan (settleMs) and the start-up scan alike.
    expect(scanRepository(dir, { artifact: 'onnx', settleMs: 500 }).models.get('a')?.served.map((v) => v.version)).toEqual(['2']);
    const t0 = Date.now();
    const snap = await scanRepositorySettled(dir, { artifact: 'onnx' }, { settleMs: 1_500, maxWaitMs: 5_000 });
    // Well under settleMs: the future mtime did not hold the scan back.
    expect(Date.now() - t0).toBeLessThan(700);
    expect(snap.models.get('a')?.served.map((v) => v.version)).toEqual(['2']);
  });
});

describe('a served model file replaced by removing it and copying the new one in', () => {
  it('keeps the version served while the file is missing and then young (rm model.onnx; cp new model.onnx), then reports it replaced', () => {
    const dir = repo();
    const nowMs = Date.now();
    const old = new Date(nowMs - 60_000);
    for (const name of ['a', 'b']) utimesSync(join(dir, name, '1', 'model.onnx'), old, old);
    for (const name of ['a', 'b']) utimesSync(join(dir, name, '1'), old, old);
    const file = join(dir, 'a', '1', 'model.onnx');
    const first = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs });
    expect(first.models.get('a')?.served.map((v) => v.version)).toEqual(['1']);
    // `install`, `cp --remove-destination` or a script's `rm -f; cp`: for a moment there is no file.
    rmSync(file);
    const gone = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs, previous: first });
    expect(gone.problems).toEqual([]);
    expect(diffServed(first, gone)).toEqual({ added: [], removed: [], configChanged: [], replaced: [] });
    writeFileSync(file, 'new bytes');
    const copying = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs, previous: gone });
    expect(diffServed(gone, copying)).toEqual({ added: [], removed: [], configChanged: [], replaced: [] });
    const settled = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs: nowMs + 10_000, previous: copying });
    const diff = diffServed(copying, settled);
    expect([...diff.added, ...diff.removed]).toEqual([]);
    expect(diff.replaced.map((v) => `${v.model}@${v.version}`)).toEqual(['a@1']);
  });

  it('a served version whose file stays missing past settleMs is reported and no longer served', () => {
    const dir = repo();
    const nowMs = Date.now();
    const first = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs: nowMs + 10_000 });
    rmSync(join(dir, 'a', '1', 'model.onnx'));
    const gone = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs: nowMs + 10_000, previous: first });
    expect(diffServed(first, gone).removed.map((v) => `${v.model}@${v.version}`)).toEqual(['a@1']);
    expect(gone.problems.map((p) => p.message)).toContain('missing model.onnx (needed by the simulator backend)');
  });
});

describe('version directory names', () => {
  it('serves a timestamp-named version (TensorFlow exports name them by Unix time) as the newest, ordered as a number', () => {
    const dir = repo();
    for (const v of ['1764500000', '20261130153000']) {
      mkdirSync(join(dir, 'a', v));
      writeFileSync(join(dir, 'a', v, 'model.onnx'), 'x');
    }
    const snap = scanRepository(dir, { artifact: 'onnx' });
    expect(snap.problems).toEqual([]);
    expect(snap.models.get('a')?.versions.map((v) => v.version)).toEqual(['1', '1764500000', '20261130153000']);
    expect(snap.models.get('a')?.served.map((v) => v.version)).toEqual(['20261130153000']);
  });

  it('a number too long to order exactly is refused with a message that says so', () => {
    const dir = repo();
    mkdirSync(join(dir, 'a', '12345678901234567890'));
    const [problem] = scanRepository(dir, { artifact: 'onnx' }).problems;
    expect(problem?.path).toBe(join(dir, 'a', '12345678901234567890'));
    expect(problem?.message).toMatch(/at most 15 digits/);
  });
});

describe('a config.yaml saved by an editor that renames the old file away first (vim, emacs backups)', () => {
  it('keeps the model served through the moment the file is missing, and reports it once it stays missing', () => {
    const dir = repo();
    const nowMs = Date.now();
    const first = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs: nowMs + 10_000 });
    const config = join(dir, 'a', 'config.yaml');
    renameSync(config, `${config}~`);
    const saving = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs, previous: first });
    expect(saving.problems).toEqual([]);
    expect(diffServed(first, saving)).toEqual({ added: [], removed: [], configChanged: [], replaced: [] });
    const gone = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs: nowMs + 10_000, previous: saving });
    expect(diffServed(saving, gone).removed.map((v) => `${v.model}@${v.version}`)).toEqual(['a@1']);
    expect(gone.problems.map((p) => `${p.path}: ${p.message}`)).toEqual([`${join(dir, 'a')}: missing config.yaml (every model directory needs one)`]);
  });

  it('keeps the last valid config through such a save that writes a broken file', () => {
    const dir = repo();
    const nowMs = Date.now();
    const configCache: ConfigCache = new Map();
    const first = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs: nowMs + 10_000, configCache });
    const config = join(dir, 'a', 'config.yaml');
    renameSync(config, `${config}~`);
    const saving = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs, previous: first, configCache });
    writeFileSync(config, 'name: a\ninputs: [\n');
    const broken = scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs: nowMs + 10_000, previous: saving, configCache });
    expect(broken.models.get('a')?.config).toEqual(first.models.get('a')?.config);
    expect(diffServed(first, broken)).toEqual({ added: [], removed: [], configChanged: [], replaced: [] });
    expect(broken.problems.map((p) => p.message).join('\n')).toMatch(/not valid YAML.*still serving the model with the last valid config.yaml/s);
  });
});

describe('a specific versionPolicy', () => {
  it('naming a version with no directory is a problem of config.yaml, while the versions found are served', () => {
    const dir = repo();
    mkdirSync(join(dir, 'a', '2'));
    writeFileSync(join(dir, 'a', '2', 'model.onnx'), 'x');
    // A typo (20 for 2, or 3 before it is deployed): requests pinned to it would be refused.
    writeFileSync(join(dir, 'a', 'config.yaml'), `${CONFIG.replace('NAME', 'a')}versionPolicy: { kind: specific, versions: [1, 3, 20] }\n`);
    const snap = scanRepository(dir, { artifact: 'onnx' });
    expect(snap.models.get('a')?.served.map((v) => v.version)).toEqual(['1']);
    expect(snap.problems.map((p) => `${p.path}: ${p.message}`)).toEqual([
      `${join(dir, 'a', 'config.yaml')}: versionPolicy.versions lists 3, 20, but ${join(dir, 'a')} has no such version directory (found [1, 2]): deploy it, or take it off the list`,
    ]);
  });

  it('naming a version still being copied in is not a problem yet', () => {
    const dir = repo();
    writeFileSync(join(dir, 'a', 'config.yaml'), `${CONFIG.replace('NAME', 'a')}versionPolicy: { kind: specific, versions: [1, 2] }\n`);
    const old = new Date(Date.now() - 60_000);
    utimesSync(join(dir, 'a', '1', 'model.onnx'), old, old);
    mkdirSync(join(dir, 'a', '2'));
    writeFileSync(join(dir, 'a', '2', 'model.onnx'), 'half');
    expect(scanRepository(dir, { artifact: 'onnx', settleMs: 500, nowMs: Date.now() }).problems.filter((p) => p.path.startsWith(join(dir, 'a')))).toEqual([]);
  });
});

describe('the start-up scan and a model still being copied in', () => {
  it('waits for a version directory whose model file has not appeared yet (mkdir, then cp), and serves it', async () => {
    const dir = settledRepo();
    // A new model is being deployed as the worker starts: its directory and config are there, the file not yet.
    mkdirSync(join(dir, 'b', '1'), { recursive: true });
    writeFileSync(join(dir, 'b', 'config.yaml'), CONFIG.replace('NAME', 'b'));
    const copy = setTimeout(() => writeFileSync(join(dir, 'b', '1', 'model.onnx'), 'complete'), 150);
    const waits: string[][] = [];
    try {
      const snap = await scanRepositorySettled(dir, { artifact: 'onnx' }, { settleMs: 300, maxWaitMs: 5_000, onWait: (_ms, paths) => waits.push([...paths]) });
      expect(snap.models.get('b')?.served.map((v) => v.version)).toEqual(['1']);
      expect(snap.problems).toEqual([]);
      expect(waits[0]).toEqual([join(dir, 'b', '1')]);
    } finally {
      clearTimeout(copy);
    }
  });
});

describe('a version number given to a file', () => {
  it('is a problem naming the fix (cp model.onnx models/a/2 made a file, not version 2), while other files are ignored', () => {
    const dir = repo();
    writeFileSync(join(dir, 'a', '2'), 'x');
    writeFileSync(join(dir, 'a', 'README.md'), 'notes');
    const snap = scanRepository(dir, { artifact: 'onnx' });
    expect(snap.models.get('a')?.served.map((v) => v.version)).toEqual(['1']);
    expect(snap.problems.map((p) => `${p.path}: ${p.message}`)).toEqual([
      `${join(dir, 'a', '2')}: is a file, but a version is a directory holding model.onnx: make it one (mv ${join(dir, 'a', '2')} ${join(dir, 'a', '2')}.tmp && mkdir ${join(dir, 'a', '2')} && mv ${join(dir, 'a', '2')}.tmp ${join(dir, 'a', '2', 'model.onnx')})`,
    ]);
  });
});

describe('a model file that is a Git LFS pointer (a clone without git lfs pull)', () => {
  it('is a problem saying so and how to fetch the real file, not left to a load failing as a malformed model', () => {
    const dir = repo();
    writeFileSync(join(dir, 'a', '1', 'model.onnx'), 'version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 1048576\n');
    const snap = scanRepository(dir, { artifact: 'onnx' });
    expect(snap.problems.map((p) => `${p.path}: ${p.message}`)).toEqual([
      `${join(dir, 'a', '1')}: model.onnx is a Git LFS pointer (132 bytes), not the model: run git lfs pull in the repository, or copy the real file in`,
    ]);
  });
});

describe('the start-up scan and a model directory still being copied in', () => {
  it('waits for the config.yaml of a model directory made just now (cp -r copies its version first), and serves the model', async () => {
    const dir = settledRepo();
    mkdirSync(join(dir, 'b', '1'), { recursive: true });
    writeFileSync(join(dir, 'b', '1', 'model.onnx'), 'complete');
    const past = new Date(Date.now() - 60_000);
    utimesSync(join(dir, 'b', '1', 'model.onnx'), past, past);
    const copy = setTimeout(() => writeFileSync(join(dir, 'b', 'config.yaml'), CONFIG.replace('NAME', 'b')), 150);
    try {
      const snap = await scanRepositorySettled(dir, { artifact: 'onnx' }, { settleMs: 300, maxWaitMs: 5_000 });
      expect(snap.models.get('b')?.served.map((v) => v.version)).toEqual(['1']);
      expect(snap.problems).toEqual([]);
    } finally {
      clearTimeout(copy);
    }
  });
});

describe('a model file that is a symlink to nothing (its release directory removed)', () => {
  it('is reported as such, naming the target, not as a missing file', () => {
    const dir = repo();
    const file = join(dir, 'a', '1', 'model.onnx');
    rmSync(file);
    symlinkSync('/releases/gone/model.onnx', file);
    const [problem] = scanRepository(dir, { artifact: 'onnx' }).problems;
    expect(`${problem?.path}: ${problem?.message}`).toBe(`${join(dir, 'a', '1')}: model.onnx is a symlink to /releases/gone/model.onnx, which does not exist: point it at the model file`);
  });
});

describe('the scan through fs.promises (a worker poll)', () => {
  it('finds what the blocking scan finds, problems and cached configs included', async () => {
    const dir = repo();
    writeFileSync(join(dir, 'a', '1', 'model.onnx'), 'version https://git-lfs.github.com/spec/v1\n');
    symlinkSync('/releases/gone', join(dir, 'a', '2'));
    writeFileSync(join(dir, 'b', 'config.yaml'), 'name: [');
    mkdirSync(join(dir, 'c'));
    const cache: ConfigCache = new Map();
    const sync = scanRepository(dir, { artifact: 'onnx' });
    const viaPromises = await scanRepositoryAsync(dir, { artifact: 'onnx', configCache: cache });
    expect(viaPromises).toEqual(sync);
    expect(viaPromises.problems.length).toBeGreaterThanOrEqual(4);
    expect([...cache.keys()]).toEqual([join(dir, 'a', 'config.yaml'), join(dir, 'b', 'config.yaml')]);
  });

  it('reads through the file system it is given, one call at a time', async () => {
    const dir = repo();
    let inFlight = 0;
    let most = 0;
    const calls: string[] = [];
    const slow = <T>(op: string, run: (path: string) => Promise<T>) => async (path: string): Promise<T> => {
      calls.push(op);
      most = Math.max(most, ++inFlight);
      await new Promise((r) => setTimeout(r, 1));
      try {
        return await run(path);
      } finally {
        inFlight--;
      }
    };
    const fs: RepositoryFs = {
      stat: slow('stat', nodeRepositoryFs.stat),
      readdir: slow('readdir', nodeRepositoryFs.readdir),
      readFile: slow('readFile', nodeRepositoryFs.readFile),
      readlink: slow('readlink', nodeRepositoryFs.readlink),
    };
    const snap = await scanRepositoryAsync(dir, { artifact: 'onnx', fs });
    expect([...snap.models.keys()]).toEqual(['a', 'b']);
    expect(most).toBe(1);
    expect(calls).toContain('readFile');
  });
});

describe('a poll scan on a file system that fails a read for a moment (an NFS soft mount timing out: EIO, ESTALE)', () => {
  it.each([
    ['the model directory', (dir: string) => join(dir, 'a')],
    ['its config.yaml', (dir: string) => join(dir, 'a', 'config.yaml')],
    ['the version directory', (dir: string) => join(dir, 'a', '1')],
    ['the model file', (dir: string) => join(dir, 'a', '1', 'model.onnx')],
  ])('a stat of %s failing with EIO or ESTALE removes no served version: the scan fails (the worker serves on)', async (_what, pathOf) => {
    for (const code of ['EIO', 'ESTALE']) {
      const dir = repo();
      // Deployed an hour ago: nothing in it is young enough to pass for a copy under way.
      const anHourAgo = new Date(Date.now() - 3_600_000);
      for (const path of ['a/1/model.onnx', 'a/1', 'a/config.yaml', 'a']) utimesSync(join(dir, path), anHourAgo, anHourAgo);
      const configCache: ConfigCache = new Map();
      const previous = await scanRepositoryAsync(dir, { artifact: 'onnx', configCache });
      const failing = pathOf(dir);
      const fs: RepositoryFs = {
        ...nodeRepositoryFs,
        stat: (path) => (path === failing ? Promise.reject(Object.assign(new Error(`${code}: i/o error, stat '${path}'`), { code })) : nodeRepositoryFs.stat(path)),
      };
      let removed: string[];
      try {
        const next = await scanRepositoryAsync(dir, { artifact: 'onnx', configCache, previous, settleMs: 500, fs });
        removed = diffServed(previous, next).removed.map((v) => `${v.model}@${v.version}`);
      } catch (err) {
        expect((err as Error).message).toContain(code);
        removed = [];
      }
      expect(removed, `${code} on ${failing}`).toEqual([]);
    }
  });
});

describe('a poll scan of a repository whose path is gone (its volume unmounted, a release link removed)', () => {
  it('fails naming what the file system said and that the worker serves on, not blaming the fleet config', async () => {
    const dir = repo();
    const previous = await scanRepositoryAsync(dir, { artifact: 'onnx' });
    renameSync(dir, `${dir}.away`);
    try {
      await expect(scanRepositoryAsync(dir, { artifact: 'onnx', previous, settleMs: 500 })).rejects.toMatchObject({
        code: 'SERVICE_UNAVAILABLE',
        message: `model repository ${dir} cannot be read (ENOENT); serving on with the loaded versions until it can`,
      });
      // At start (no previous scan) a wrong path is the fleet config's.
      expect(() => scanRepository(dir, { artifact: 'onnx' })).toThrow(`model repository ${dir} is not a directory (ENOENT); set modelRepository in the fleet config`);
    } finally {
      renameSync(`${dir}.away`, dir);
    }
  });
});

describe('symlinks that point outside the repository', () => {
  // `models validate` said only "version directories must be positive integers" for a release
  // pointer aimed outside the repository, and "cannot read it" for a link to nothing.
  it('names the target and what a pointer may point at, for a pointer and for a link to nothing', () => {
    const dir = repo();
    const outside = tempDir('npu-fleet-outside-');
    mkdirSync(join(outside, '3'));
    writeFileSync(join(outside, '3', 'model.onnx'), 'x');
    symlinkSync(join(outside, '3'), join(dir, 'a', 'current'));
    symlinkSync(join(outside, 'gone'), join(dir, 'a', '2'));
    const problems = scanRepository(dir, { artifact: 'onnx' }).problems.map((p) => `${p.path}: ${p.message}`);
    expect(problems).toContain(
      `${join(dir, 'a', 'current')}: is a symlink to ${join(outside, '3')}, outside the repository: a release pointer (current -> 3) must name a version directory beside it (ln -sfn 3 current); ` +
        'copy the version into the model directory under its number instead',
    );
    expect(problems).toContain(`${join(dir, 'a', '2')}: is a symlink to ${join(outside, 'gone')} (outside the repository), which does not exist: point it at an existing directory or remove it`);
  });
});
