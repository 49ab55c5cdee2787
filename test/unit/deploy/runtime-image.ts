// Lays out the Dockerfile's runtime stage in a directory, from this checkout, without a Docker
// engine: context COPYs come from the checkout (filtered by .dockerignore), what the build stage's
// `npm ci --omit=dev` makes comes from this checkout's own `npm install` (the built addon and
// simulator in build/, node_modules pruned to the production dependency tree), and the runtime
// stage's COPY --from lines pick from that. Anything it cannot emulate is an error, not a guess.
import { spawnSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, lstatSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import { basename, join, posix, relative } from 'node:path';
import { commandOf, copyOf, envOf, type Dockerfile, type Instruction, type Stage } from './dockerfile-parser.ts';

type Origin = { kind: 'context'; path: string } | { kind: 'prod-modules' } | { kind: 'native-build' };

interface StageEntry {
  at: string;
  origin: Origin;
  /** A later `chmod -R u=rwX,go=rX` over it made it readable by every user. */
  normalized: boolean;
}

export interface RuntimeImage {
  /** The image's filesystem root (only what the runtime stage copies). */
  rootDir: string;
  workdir: string;
  env: Record<string, string>;
  user: string | undefined;
  entrypoint: string[];
  cmd: string[];
  /** Where `workdir` is on this machine. */
  appDir: string;
}

/** The mode `chmod -R u=rwX,go=rX` leaves: the build stage's normalization of context modes. */
const NORMALIZE = /chmod -R u=rwX,go=rX (\S+)/;

const under = (path: string, dir: string): boolean => path === dir || path.startsWith(`${dir}/`);

function destOf(dest: string, workdir: string): string {
  return posix.resolve(workdir, dest);
}

/** What a stage's filesystem holds under the paths its instructions wrote, and where it came from. */
function stageEntries(stage: Stage, root: string, ignored: (path: string) => boolean): StageEntry[] {
  const entries: StageEntry[] = [];
  let workdir = '/';
  for (const ins of stage.instructions) {
    if (ins.keyword === 'WORKDIR') workdir = posix.resolve(workdir, ins.args.trim());
    else if (ins.keyword === 'COPY') {
      const copy = copyOf(ins);
      if (copy.from !== undefined) throw new Error(`line ${ins.line}: a build stage copying from another stage is not emulated`);
      for (const source of copy.sources) {
        const path = posix.normalize(source).replace(/\/$/, '');
        if (!existsSync(join(root, path))) throw new Error(`line ${ins.line}: COPY source ${source} does not exist in the repository`);
        if (ignored(path)) throw new Error(`line ${ins.line}: COPY source ${source} is excluded by .dockerignore`);
        const dest = destOf(copy.dest, workdir);
        const intoDir = copy.dest.endsWith('/') || copy.sources.length > 1;
        const at = statSync(join(root, path)).isDirectory() || !intoDir ? dest : posix.join(dest, basename(path));
        entries.push({ at, origin: { kind: 'context', path }, normalized: false });
      }
    } else if (ins.keyword === 'RUN') {
      const run = ins.args;
      if (/\bnpm ci\b/.test(run) && /--omit=dev\b/.test(run)) {
        entries.push({ at: posix.join(workdir, 'node_modules'), origin: { kind: 'prod-modules' }, normalized: false });
        entries.push({ at: posix.join(workdir, 'build'), origin: { kind: 'native-build' }, normalized: false });
      }
      const chmod = NORMALIZE.exec(run);
      const dir = chmod?.[1] === undefined ? undefined : posix.resolve(workdir, chmod[1]);
      for (const e of entries) if (dir !== undefined && under(e.at, dir)) e.normalized = true;
    }
  }
  return entries;
}

/** The production dependency tree of the checkout, as `npm ci --omit=dev` would install it. */
function copyProductionModules(root: string, target: string): void {
  const ls = spawnSync('npm', ['ls', '--omit=dev', '--parseable', '--all'], { cwd: root, encoding: 'utf8' });
  if (ls.status !== 0) throw new Error(`npm ls --omit=dev failed (${String(ls.status)}): ${ls.stderr}`);
  const modules = join(root, 'node_modules');
  const packages = ls.stdout.split('\n').filter((p) => p.startsWith(`${modules}/`));
  if (packages.length === 0) throw new Error('npm ls --omit=dev listed no installed package: run npm install');
  for (const pkg of packages) {
    // Nested node_modules are listed on their own when production needs them.
    const nested = join(pkg, 'node_modules');
    cpSync(pkg, join(target, relative(modules, pkg)), { recursive: true, filter: (src) => src !== nested });
  }
}

function copyInto(from: string, to: string, filter?: (src: string) => boolean): void {
  if (!existsSync(from)) throw new Error(`${from} does not exist in this checkout (run npm install?)`);
  mkdirSync(join(to, '..'), { recursive: true });
  cpSync(from, to, { recursive: true, ...(filter ? { filter } : {}) });
}

function chmodTree(path: string, mode: (current: number, dir: boolean) => number): void {
  const st = lstatSync(path);
  if (st.isSymbolicLink()) return;
  chmodSync(path, mode(st.mode & 0o777, st.isDirectory()));
  if (st.isDirectory()) for (const name of readdirSync(path)) chmodTree(join(path, name), mode);
}

/** `chmod -R u=rwX,go=rX`. */
const normalizeModes = (path: string): void => chmodTree(path, (m, dir) => (dir || m & 0o111 ? 0o755 : 0o644));

/**
 * Context files keep the builder's modes. Laid out as a builder with umask 077 would have them
 * (owner only), so the image works only if the Dockerfile makes them readable to its user.
 */
const asOwnerOnly = (path: string): void => chmodTree(path, (m) => m & 0o700);

export function assembleRuntimeStage(df: Dockerfile, root: string, ignored: (path: string) => boolean, rootDir: string): RuntimeImage {
  const runtime = df.stages.at(-1);
  if (runtime === undefined) throw new Error('Dockerfile has no stage');
  const built = new Map<string, StageEntry[]>();
  for (const stage of df.stages.slice(0, -1)) if (stage.name) built.set(stage.name, stageEntries(stage, root, ignored));

  const resolveIn = (stageName: string, path: string, ins: Instruction): { from: string; origin: Origin; normalized: boolean } => {
    const entries = built.get(stageName);
    if (entries === undefined) throw new Error(`line ${ins.line}: no stage named ${stageName}`);
    const entry = entries.filter((e) => under(path, e.at)).sort((a, b) => b.at.length - a.at.length)[0];
    if (entry === undefined) throw new Error(`line ${ins.line}: ${path} is not made by stage ${stageName}`);
    const rest = posix.relative(entry.at, path);
    const normalized = entry.normalized;
    if (entry.origin.kind === 'context') return { from: join(root, entry.origin.path, rest), origin: entry.origin, normalized };
    if (entry.origin.kind === 'native-build') return { from: join(root, 'build', rest), origin: entry.origin, normalized };
    if (rest !== '') throw new Error(`line ${ins.line}: copy node_modules whole, not ${path}`);
    return { from: join(root, 'node_modules'), origin: entry.origin, normalized };
  };

  let workdir = '/';
  let user: string | undefined;
  const env: Record<string, string> = {};
  const toNormalize: string[] = [];
  for (const ins of runtime.instructions) {
    if (ins.keyword === 'WORKDIR') workdir = posix.resolve(workdir, ins.args.trim());
    else if (ins.keyword === 'ENV') Object.assign(env, envOf(ins));
    else if (ins.keyword === 'USER') user = ins.args.trim();
    else if (ins.keyword === 'RUN') throw new Error(`line ${ins.line}: RUN in the runtime stage is not emulated`);
    else if (ins.keyword === 'COPY') {
      const copy = copyOf(ins);
      const dest = destOf(copy.dest, workdir);
      const intoDir = copy.dest.endsWith('/') || copy.sources.length > 1;
      for (const source of copy.sources) {
        const target = (p: string): string => join(rootDir, intoDir ? posix.join(dest, basename(p)) : dest);
        if (copy.from === undefined) {
          const path = posix.normalize(source).replace(/\/$/, '');
          if (ignored(path)) throw new Error(`line ${ins.line}: COPY source ${source} is excluded by .dockerignore`);
          const isDir = existsSync(join(root, path)) && statSync(join(root, path)).isDirectory();
          const to = isDir ? join(rootDir, dest) : target(path);
          copyInto(join(root, path), to, (src) => !ignored(relative(root, src)));
          asOwnerOnly(to);
          continue;
        }
        const resolved = resolveIn(copy.from, posix.resolve('/', source), ins);
        const isDir = existsSync(resolved.from) && statSync(resolved.from).isDirectory();
        const to = isDir ? join(rootDir, dest) : target(source);
        if (resolved.origin.kind === 'prod-modules') copyProductionModules(root, to);
        else if (resolved.origin.kind === 'context') {
          copyInto(resolved.from, to, (src) => !ignored(relative(root, src)));
          asOwnerOnly(to);
        } else copyInto(resolved.from, to);
        if (resolved.normalized) toNormalize.push(to);
      }
    }
  }
  for (const path of toNormalize) normalizeModes(path);
  // The image's / and its parents of WORKDIR are 0755; a temp dir is 0700.
  for (let dir = join(rootDir, workdir); dir.startsWith(rootDir); dir = join(dir, '..')) {
    chmodSync(dir, 0o755);
    if (dir === rootDir) break;
  }
  const last = (keyword: string): Instruction | undefined => runtime.instructions.filter((i) => i.keyword === keyword).at(-1);
  const entrypoint = last('ENTRYPOINT');
  const cmd = last('CMD');
  return {
    rootDir,
    workdir,
    env,
    user,
    entrypoint: entrypoint ? commandOf(entrypoint.args) : [],
    cmd: cmd ? commandOf(cmd.args) : [],
    appDir: join(rootDir, workdir),
  };
}
