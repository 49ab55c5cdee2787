// The Dockerfile, checked without a Docker engine: its instructions are parsed, the runtime stage is
// laid out from this checkout (runtime-image.ts) and run the way the image runs it, as its user.
import { spawn, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { workerNodeFlags } from '../../../src/runtime/worker-node-flags.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { commandOf, copyOf, dockerIgnore, envOf, instructionsOf, lastOf, parseDockerfile, type Stage } from './dockerfile-parser.ts';
import { assembleRuntimeStage, type RuntimeImage } from './runtime-image.ts';

const ROOT = join(import.meta.dirname, '../../..');
const dockerfile = parseDockerfile(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'));
const ignored = dockerIgnore(readFileSync(join(ROOT, '.dockerignore'), 'utf8'));
const defaults = parseFleetConfig({});

const stageNamed = (name: string): Stage => {
  const stage = dockerfile.stages.find((s) => s.name === name);
  if (stage === undefined) throw new Error(`Dockerfile has no stage ${name}`);
  return stage;
};
const build = stageNamed('build');
const runtime = dockerfile.stages.at(-1) as Stage;
const runtimeEnv = Object.assign({}, ...instructionsOf(runtime, 'ENV').map(envOf)) as Record<string, string>;
const args = (stage: Stage, keyword: string): string => lastOf(stage, keyword)?.args.trim() ?? '';

type Obj = Record<string, unknown>;
const manifest = parseAllDocuments(readFileSync(join(ROOT, 'dashboards/kubernetes/worker.yaml'), 'utf8')).map((d) => d.toJS() as Obj);
const podSpec = ((manifest.find((d) => d.kind === 'Deployment')?.spec as Obj).template as Obj).spec as Obj;
const container = (podSpec.containers as Obj[])[0] as Obj;

function walk(path: string): Array<{ path: string; mode: number; dir: boolean }> {
  const st = lstatSync(path);
  if (st.isSymbolicLink()) return [];
  const self = { path, mode: st.mode, dir: st.isDirectory() };
  return self.dir ? [self, ...readdirSync(path).flatMap((name) => walk(join(path, name)))] : [self];
}

function gitFiles(path: string): string[] {
  const ls = spawnSync('git', ['ls-files', '-z', '--', path], { cwd: ROOT, encoding: 'utf8' });
  if (ls.status !== 0) throw new Error(`git ls-files failed: ${ls.stderr}`);
  return ls.stdout.split('\0').filter(Boolean);
}

describe('.dockerignore matching (Docker rules)', () => {
  it('an allowlist re-includes a directory and all below it; later patterns win', () => {
    const m = dockerIgnore('*\n!src\n!native/acl-sim/src\n**/*.log\n!keep.log\n');
    expect(m('src/cli/main.ts')).toBe(false);
    expect(m('node_modules/tsx/package.json')).toBe(true);
    expect(m('native/src/binding.cc')).toBe(true);
    expect(m('native/acl-sim/src/graph.cc')).toBe(false);
    expect(m('src/deep/x.log')).toBe(true);
    expect(m('keep.log')).toBe(false);
    expect(dockerIgnore('/build/\nsrc/*.ts\n')('build/Release/a.node')).toBe(true);
    expect(dockerIgnore('src/*.ts\n')('src/a/b.ts')).toBe(false);
  });
});

describe('Dockerfile', () => {
  it('builds on node:20-bookworm and runs on node:20-bookworm-slim (build args), the runtime taking everything from the build stage', () => {
    expect(build.image).toBe('node:20-bookworm');
    expect(runtime.image).toBe('node:20-bookworm-slim');
    expect(dockerfile.stages.length).toBe(2);
    // Context modes are normalized in the build stage only: a runtime COPY from the context would skip that.
    for (const ins of instructionsOf(runtime, 'COPY')) expect(copyOf(ins).from, `line ${ins.line}`).toBe('build');
  });

  it('copies from the context only files that exist, each tracked file under them let through by .dockerignore', () => {
    const copies = instructionsOf(build, 'COPY').map(copyOf);
    expect(copies.length).toBeGreaterThan(0);
    for (const source of copies.flatMap((c) => c.sources)) {
      const files = gitFiles(source);
      expect(files.length, `${source} holds no tracked file`).toBeGreaterThan(0);
      expect(files.filter((f) => ignored(f)), `${source}: excluded by .dockerignore`).toEqual([]);
    }
    // What `npm install` made for this machine stays out of the context.
    for (const path of ['node_modules/tsx/package.json', 'build/Release/npu_fleet.node', 'native/acl-sim/build/sim_test_fast', '.git/HEAD', '.cache/kafka/x.jar']) {
      expect(ignored(path), path).toBe(true);
    }
  });

  it('builds the native code with npm ci --omit=dev after copying every input binding.gyp names', () => {
    const ciAt = build.instructions.findIndex((i) => i.keyword === 'RUN' && /\bnpm ci\b.*--omit=dev\b/.test(i.args));
    expect(ciAt).toBeGreaterThan(-1);
    const before = build.instructions.slice(0, ciAt).filter((i) => i.keyword === 'COPY').flatMap((i) => copyOf(i).sources);
    const gyp = readFileSync(join(ROOT, 'binding.gyp'), 'utf8').replace(/^\s*#.*$/gm, '');
    const inputs = [...gyp.matchAll(/native\/[\w./-]+/g)].map((m) => m[0].replace(/\/$/, ''));
    expect(inputs.length).toBeGreaterThan(0);
    for (const input of ['package.json', 'package-lock.json', 'binding.gyp', ...inputs]) {
      expect(before.some((s) => input === s || input.startsWith(`${s}/`)), `${input} is not in the build stage before npm ci`).toBe(true);
    }
    // With --omit=dev the install script has npm's bundled node-gyp, and what binding.gyp requires
    // must be a production dependency.
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string>; dependencies: Record<string, string> };
    expect(pkg.scripts.install).toMatch(/^node-gyp rebuild\b/);
    for (const m of gyp.matchAll(/require\('([^']+)'\)/g)) {
      if (!m[1]?.startsWith('node:') && !['fs', 'path'].includes(m[1] ?? '')) expect(Object.keys(pkg.dependencies)).toContain(m[1]);
    }
    // Every file the runtime stage takes must be readable by its user, whatever the builder's umask.
    const last = build.instructions.at(-1);
    expect(last?.keyword).toBe('RUN');
    expect(last?.args).toMatch(new RegExp(`chmod -R u=rwX,go=rX ${args(build, 'WORKDIR')}$`));
  });

  it('runs `node bin/npu-fleet.js` (default `start`) as a non-root user, with the worker flags, port and stop signal', () => {
    expect(commandOf(args(runtime, 'ENTRYPOINT'))).toEqual(['node', 'bin/npu-fleet.js']);
    expect(commandOf(args(runtime, 'CMD'))).toEqual(['start']);
    const [uid, gid] = args(runtime, 'USER').split(':').map(Number);
    expect(uid).toBeGreaterThan(0);
    expect(gid).toBeGreaterThan(0);
    expect(runtimeEnv.NODE_OPTIONS?.split(/\s+/)).toEqual(expect.arrayContaining(workerNodeFlags(defaults.worker)));
    expect(workerNodeFlags(defaults.worker).length).toBeGreaterThan(0);
    expect(args(runtime, 'EXPOSE').split(/\s+/)).toContain(String(defaults.worker.metricsPort));
    expect(args(runtime, 'STOPSIGNAL')).toBe('SIGTERM');
  });

  it('is what dashboards/kubernetes/worker.yaml runs: its command is the ENTRYPOINT run in the WORKDIR, nothing mounted over it', () => {
    const command = (container.command as unknown[]).map(String);
    expect(command.slice(0, 2)).toEqual(commandOf(args(runtime, 'ENTRYPOINT')));
    const workdir = args(runtime, 'WORKDIR');
    expect(container.workingDir ?? workdir).toBe(workdir);
    expect(String(container.image)).toMatch(/\/npu-fleet:[\w.-]+$/);
    const nodeOptions = (container.env as Obj[]).find((e) => e.name === 'NODE_OPTIONS')?.value;
    expect(nodeOptions).toBe(runtimeEnv.NODE_OPTIONS);
    for (const mount of container.volumeMounts as Obj[]) {
      const at = String(mount.mountPath);
      expect(at === workdir || workdir.startsWith(`${at}/`) || at.startsWith(`${workdir}/`), `${at} hides the app`).toBe(false);
    }
  });
});

describe('the runtime stage, laid out from this checkout and run as the image runs it', () => {
  let image: RuntimeImage;
  const asRoot = process.getuid?.() === 0;

  // A temp dir nobody may write to: the image must run with a read-only root filesystem.
  let readOnlyTmp: string;

  beforeAll(() => {
    image = assembleRuntimeStage(dockerfile, ROOT, ignored, tempDir('npu-fleet-image-'));
    readOnlyTmp = join(image.rootDir, 'read-only-tmp');
    mkdirSync(readOnlyTmp, { mode: 0o555 });
  });

  /**
   * As `docker run IMAGE args`: the image's env only, its WORKDIR, its USER (when this test may
   * switch to it), and /tmp read-only.
   */
  const runOptions = (extraEnv: Record<string, string> = {}) => {
    const [uid, gid] = (image.user ?? '').split(':').map(Number);
    return {
      cwd: image.appDir,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', TMPDIR: readOnlyTmp, ...image.env, ...extraEnv },
      ...(asRoot && uid !== undefined && gid !== undefined ? { uid, gid } : {}),
    };
  };
  const argv = (cmd: string[]): string[] => {
    expect(image.entrypoint[0]).toBe('node');
    return [...image.entrypoint.slice(1), ...cmd];
  };
  const show = (r: SpawnSyncReturns<string>): string => `exit ${String(r.status)}\n${r.stdout}\n${r.stderr}`;

  it('holds bin/npu-fleet.js at the WORKDIR, the built addon and simulator, and only production packages', () => {
    expect(existsSync(join(image.appDir, 'bin/npu-fleet.js'))).toBe(true);
    expect(existsSync(join(image.appDir, 'build/Release/npu_fleet.node'))).toBe(true);
    expect(existsSync(join(image.appDir, 'build/Release/libacl_sim.so'))).toBe(true);
    expect(existsSync(join(image.appDir, 'node_modules/tsx/package.json'))).toBe(true);
    for (const dev of ['vitest', 'typescript', 'node-gyp', 'onnxruntime-node']) expect(existsSync(join(image.appDir, 'node_modules', dev)), dev).toBe(false);
    expect(existsSync(join(image.appDir, 'test'))).toBe(false);
  });

  it('every file is readable by any user, the image user included, and writable by none but root', () => {
    const bad = walk(image.appDir).filter(({ mode, dir }) => (mode & 0o004) === 0 || (dir && (mode & 0o001) === 0) || (mode & 0o022) !== 0);
    expect(bad.map((b) => `${b.path} ${(b.mode & 0o777).toString(8)}`)).toEqual([]);
    if (!asRoot) return;
    // As the image's user: access(2) answers, not the mode bits alone.
    const r = spawnSync('find', ['.', '(', '!', '-readable', '-o', '-writable', ')', '-print'], { ...runOptions(), encoding: 'utf8' });
    expect(r.status, show(r)).toBe(0);
    expect(r.stdout.trim()).toBe('');
  });

  it('validates and loads the example models on the bundled simulator', () => {
    const r = spawnSync(process.execPath, argv(['models', 'validate', 'examples/models', '--load']), { ...runOptions(), encoding: 'utf8', timeout: 30_000 });
    expect(r.status, show(r)).toBe(0);
    expect(r.stdout).toMatch(/[1-9]\d* version\(s\) loaded, 0 failed \(artifact: model\.onnx, sim device 0\)/);
  });

  it('answers the manifest command with its usage (the worker subcommand is there)', () => {
    const command = (container.command as unknown[]).map(String);
    const r = spawnSync(process.execPath, argv([command[2] ?? '', '--help']), { ...runOptions(), encoding: 'utf8', timeout: 30_000 });
    expect(r.status, show(r)).toBe(0);
    expect(`${r.stdout}${r.stderr}`).toContain('--device');
  });

  it('`start --devices 1` serves the demo load, passes the HEALTHCHECK, and drains on SIGTERM with exit 0', async () => {
    const child = spawn(process.execPath, argv(['start', '--devices', '1']), runOptions({ NPU_FLEET__WORKER__METRICS_PORT: '0' }));
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const servedOk = (): boolean => [...out.matchAll(/^throughput \d+ req\/s .*\bok (\d+)/gm)].some((m) => Number(m[1]) > 0);
    for (const startedAt = Date.now(); !servedOk(); await new Promise((r) => setTimeout(r, 100))) {
      if (child.exitCode !== null || Date.now() - startedAt > 30_000) throw new Error(`no throughput line with ok > 0:\n${out}`);
    }
    const port = /"metricsPort":(\d+)[^\n]*serving \/metrics/.exec(out)?.[1];
    expect(port, out).toBeDefined();
    const health = commandOf(args(runtime, 'HEALTHCHECK').replace(/^CMD\s+/, ''));
    expect(health[0]).toBe('node');
    const check = (): SpawnSyncReturns<string> =>
      spawnSync(process.execPath, health.slice(1), { ...runOptions({ NPU_FLEET__WORKER__METRICS_PORT: port ?? '' }), encoding: 'utf8', timeout: 10_000 });
    const healthy = check();
    expect(healthy.status, show(healthy)).toBe(0);

    child.kill('SIGTERM');
    expect(await exited, out).toBe(0);
    expect(out).toContain('"msg":"drained"');
    const gone = check();
    expect(gone.status, 'the HEALTHCHECK passes with no worker').toBe(1);
  });
});
