import { randomBytes } from 'node:crypto';
import { closeSync, fstatSync, linkSync, openSync, readdirSync, readFileSync, renameSync, statSync, unlinkSync, utimesSync, writeFileSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { FleetError } from '../errors/fleet-error.ts';

/** The holder touches its lock this often, so a lock left by a run that died elsewhere goes stale. */
export const LOCK_TOUCH_MS = 10_000;
/** A lock not touched for this long was left by a run that died (on another host, or a pid reused). */
export const LOCK_STALE_MS = 6 * LOCK_TOUCH_MS;
/** Tries a stale lock's takeover this often before calling the lock held (a takeover under way takes microseconds). */
const TAKEOVER_ATTEMPTS = 20;
const pause = new Int32Array(new SharedArrayBuffer(4));
/**
 * Tests only: the step at which this process stops (and waits to be killed), to see what a run
 * killed between two steps of taking the lock leaves behind (out-lock-kill.test.ts).
 */
const stopAt = process.env.NPU_FLEET_TEST_OUT_LOCK_STOP_AT;

/** Locks held by this process: a lock naming our own pid is ours only if it is here. */
const heldHere = new Set<string>();

interface Holder {
  readonly pid: number;
  readonly host: string;
}

/**
 * `publish --out FILE` is written by one run at a time: `FILE.lock`, made exclusively, names the
 * process and host of the run writing FILE. Two runs resumed at once each read FILE before the
 * other wrote to it, so each sent every line without an ok result: every such line was answered
 * twice. A lock left by a run that died (kill -9, a crash) is taken over: at once when its process
 * is gone from this host, else once it has not been touched for LOCK_STALE_MS; so is a stale lock
 * whose takeover was killed half-way (takeOver), and what such runs left beside it goes (sweep).
 */
export class OutLock {
  private readonly touch: NodeJS.Timeout;
  private released = false;

  private constructor(
    private readonly path: string,
    /** The inode of our lock file: release() removes the lock only while it is still this one. */
    private readonly inode: bigint,
  ) {
    heldHere.add(path);
    this.touch = setInterval(() => {
      try {
        const now = new Date();
        utimesSync(path, now, now);
      } catch {
        // Removed by hand: the run goes on; only a second run is no longer kept out.
      }
    }, LOCK_TOUCH_MS);
    this.touch.unref();
  }

  static take(out: string, nowMs: number = Date.now()): OutLock {
    const path = `${out}.lock`;
    const me: Holder = { pid: process.pid, host: hostname() };
    const text = `${JSON.stringify(me)}\n`;
    for (let attempt = 0; ; attempt++) {
      const made = create(path, text, out, 'lock');
      if (made !== undefined) return OutLock.won(path, made, me, nowMs);
      const found = readLock(path);
      if (found === 'gone') continue; // released between our create and our read
      if (attempt < TAKEOVER_ATTEMPTS && isStale(found, me, nowMs, path)) {
        const taken = takeOver(path, found.generation, text, out, me, nowMs);
        if (typeof taken === 'bigint') return OutLock.won(path, taken, me, nowMs);
        // Another run is taking the same stale lock over: its lock is in place in microseconds.
        if (taken === 'busy') Atomics.wait(pause, 0, 0, 2);
        continue;
      }
      const who = found.holder === undefined ? 'another run' : `another run (process ${found.holder.pid} on ${found.holder.host})`;
      throw new FleetError('INVALID_ARGUMENT', `--out ${out} is being written by ${who}: wait for it to end, or remove ${path} if no run writes ${out}`, {
        details: { field: 'out' },
      });
    }
  }

  private static won(path: string, inode: bigint, me: Holder, nowMs: number): OutLock {
    const lock = new OutLock(path, inode);
    try {
      sweep(path, me, nowMs);
    } catch {
      // Leftovers of killed runs are untidy, never in the way: the lock is ours either way.
    }
    return lock;
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    clearInterval(this.touch);
    heldHere.delete(this.path);
    // A lock taken over from this run (judged stale while it was away: a suspended VM, a stalled
    // mount) is the new holder's: removed, it let a third run in beside that one.
    if (inodeOf(this.path) === this.inode) removeIfPresent(this.path);
  }
}

interface FoundLock {
  readonly holder: Holder | undefined;
  /** This very lock file: its inode and modification time (a touch by its holder makes another). */
  readonly generation: string;
  readonly mtimeMs: number;
}

/**
 * Makes the lock if none is there: written whole to a file of our own, then linked to `path`, which
 * fails if `path` exists. (Made by an exclusive open and then written, a lock was empty for a
 * moment, and a run reading it then could not name its holder.)
 */
function create(path: string, text: string, out: string, what: 'lock' | 'marker'): bigint | undefined {
  const own = writeOwn(path, text, out);
  try {
    step(`${what}-written`);
    linkSync(own, path);
    step(`${what}-linked`);
    return inodeOf(own);
  } catch (cause) {
    const code = (cause as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return undefined;
    // A file system without hard links (FAT, some network shares): exclusive create, then write.
    if (code === 'EPERM' || code === 'ENOTSUP' || code === 'ENOSYS' || code === 'EOPNOTSUPP') return createInPlace(path, text, out);
    throw unwritable(out, path, cause);
  } finally {
    removeIfPresent(own);
  }
}

function createInPlace(path: string, text: string, out: string): bigint | undefined {
  let fd: number;
  try {
    fd = openSync(path, 'wx');
  } catch (cause) {
    if ((cause as NodeJS.ErrnoException).code === 'EEXIST') return undefined;
    throw unwritable(out, path, cause);
  }
  try {
    writeSync(fd, text);
    return fstatSync(fd, { bigint: true }).ino;
  } finally {
    closeSync(fd);
  }
}

/** A file only this call writes, next to the lock (a rename or link stays on one file system). */
function writeOwn(path: string, text: string, out: string): string {
  const own = `${path}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    writeFileSync(own, text, { flag: 'wx' });
  } catch (cause) {
    throw unwritable(out, path, cause);
  }
  return own;
}

/**
 * Replaces the stale lock `generation` by ours; our lock's inode when won. Unlinking it and then
 * creating ours is not atomic: two runs that had both judged it stale each did so, the later
 * unlinking the lock the earlier had just made, and both wrote FILE. So one run at a time takes
 * over a given stale lock (an exclusive marker named after it), checks the lock is still that one,
 * and renames ours over it in one step. Once ours is in place the marker goes: a run that makes it
 * again afterwards finds another lock.
 *
 * A run killed while it holds the marker left it for good, and every later run found that
 * takeover 'busy' and was refused until someone removed the lock by hand. A marker names its
 * taker like a lock does, and one whose taker is gone (isStale) is passed over to the next level
 * `.2`, `.3`, ...: removing it instead would be the same unlink-then-create race one level up (two
 * runs judging it stale, the later removing the marker the earlier had just made). Markers of a
 * lock no longer in place are swept by the next run that wins (sweep).
 */
function takeOver(path: string, generation: string, text: string, out: string, me: Holder, nowMs: number): bigint | 'busy' | 'lost' {
  let marker: string | undefined;
  for (let level = 1; marker === undefined; level++) {
    const name = `${path}.takeover-${generation}.${level}`;
    if (create(name, text, out, 'marker') !== undefined) {
      marker = name;
      break;
    }
    const found = readLock(name);
    if (found === 'gone') return 'busy'; // its taker just ended: the lock is another by now
    // A live taker puts its lock in place in microseconds.
    if (!isStale(found, me, nowMs, name)) return 'busy';
  }
  try {
    step('takeover-marked');
    if (generationOf(path) !== generation) return 'lost'; // released or taken over since it was read
    const own = writeOwn(path, text, out);
    const inode = inodeOf(own);
    step('takeover-written');
    try {
      renameSync(own, path);
    } catch (cause) {
      removeIfPresent(own);
      throw unwritable(out, path, cause);
    }
    step('takeover-renamed');
    return inode ?? 'lost';
  } finally {
    removeIfPresent(marker);
  }
}

/**
 * Removes what runs killed while taking the lock left next to it: takeover markers of a lock no
 * longer in place (a taker still holding one finds the lock changed: 'lost'), and the temporary
 * files of create() and takeOver() whose writer is gone (each holds its writer's holder line).
 * Called by a run that has just won, so the lock in place is its own.
 */
function sweep(path: string, me: Holder, nowMs: number): void {
  const prefix = `${basename(path)}.`;
  const current = generationOf(path);
  let names: string[];
  try {
    names = readdirSync(dirname(path));
  } catch {
    return; // a directory we may write but not list: leftovers stay, the lock works without it
  }
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    const rest = name.slice(prefix.length);
    const file = join(dirname(path), name);
    // A temporary file of the lock's or of a marker's (writeOwn).
    if (/(?:^|\.)\d+\.[0-9a-f]{12}\.tmp$/.test(rest)) {
      const found = readLock(file);
      if (found !== 'gone' && isStale(found, me, nowMs, file)) removeIfPresent(file);
      continue;
    }
    const marked = /^takeover-(\d+-\d+)(?:\.\d+)?$/.exec(rest);
    if (marked !== null && marked[1] !== current) removeIfPresent(file);
  }
}

function readLock(path: string): FoundLock | 'gone' {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'gone';
    return { holder: undefined, generation: 'unreadable', mtimeMs: Number.POSITIVE_INFINITY };
  }
  try {
    // From one descriptor: the holder and the generation are of the same file.
    const st = fstatSync(fd, { bigint: true });
    return { holder: parseHolder(readFileSync(fd, 'utf8')), generation: `${st.ino}-${st.mtimeNs}`, mtimeMs: Number(st.mtimeMs) };
  } finally {
    closeSync(fd);
  }
}

function generationOf(path: string): string | undefined {
  try {
    const st = statSync(path, { bigint: true });
    return `${st.ino}-${st.mtimeNs}`;
  } catch {
    return undefined;
  }
}

function inodeOf(path: string): bigint | undefined {
  try {
    return statSync(path, { bigint: true }).ino;
  } catch {
    return undefined;
  }
}

function parseHolder(text: string): Holder | undefined {
  try {
    const h = JSON.parse(text) as Partial<Holder>;
    return typeof h.pid === 'number' && typeof h.host === 'string' ? { pid: h.pid, host: h.host } : undefined;
  } catch {
    return undefined; // cut off, or made by an exclusive open not yet written: judged by its age alone
  }
}

function isStale(found: FoundLock, me: Holder, nowMs: number, path: string): boolean {
  const holder = found.holder;
  if (holder !== undefined && holder.host === me.host) {
    // Our own pid but not held here: left by an earlier process given the same pid (a container's).
    if (holder.pid === me.pid) return !heldHere.has(path);
    if (!alive(holder.pid)) return true;
  }
  return nowMs - found.mtimeMs > LOCK_STALE_MS;
}

/**
 * The lock goes beside --out, so its first write is where a bad --out shows: the message names
 * --out and why (it named the lock file and a bare ENOENT). A bad argument: nothing was done.
 */
function unwritable(out: string, path: string, cause: unknown): FleetError {
  const code = (cause as NodeJS.ErrnoException).code;
  const dir = dirname(out);
  let why: string;
  if (code === 'ENOENT' || code === 'ENOTDIR') {
    const inTheWay = fileOnPath(dir);
    why = inTheWay === undefined ? `its directory ${dir} does not exist (create it, or name a file in an existing directory)` : `${inTheWay} is not a directory`;
  } else if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS') {
    why = `no file can be made in its directory ${dir} (${code}: the results and their lock ${basename(path)} go there); name a file in a directory this user can write`;
  } else {
    why = `making its lock ${path} failed (${code ?? (cause as Error).message})`;
  }
  return new FleetError('INVALID_ARGUMENT', `--out ${out} cannot be written: ${why}`, { cause, details: { field: 'out' } });
}

/** The nearest existing ancestor of `dir` (itself included) when it is not a directory; undefined when it is one. */
function fileOnPath(dir: string): string | undefined {
  for (let at = dir; ; at = dirname(at)) {
    try {
      return statSync(at).isDirectory() ? undefined : at;
    } catch {
      if (dirname(at) === at) return undefined;
    }
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function step(name: string): void {
  if (name !== stopAt) return;
  writeSync(2, `out-lock: stopped at ${name}\n`);
  for (;;) Atomics.wait(pause, 0, 0);
}

function removeIfPresent(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // already gone
  }
}
