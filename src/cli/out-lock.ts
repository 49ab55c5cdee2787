import { randomBytes } from 'node:crypto';
import { closeSync, fstatSync, linkSync, openSync, readFileSync, renameSync, statSync, unlinkSync, utimesSync, writeFileSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { FleetError } from '../errors/fleet-error.ts';

/** The holder touches its lock this often, so a lock left by a run that died elsewhere goes stale. */
export const LOCK_TOUCH_MS = 10_000;
/** A lock not touched for this long was left by a run that died (on another host, or a pid reused). */
export const LOCK_STALE_MS = 6 * LOCK_TOUCH_MS;
/** Tries a stale lock's takeover this often before calling the lock held (a takeover under way takes microseconds). */
const TAKEOVER_ATTEMPTS = 20;
const pause = new Int32Array(new SharedArrayBuffer(4));

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
 * is gone from this host, else once it has not been touched for LOCK_STALE_MS.
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
      const made = create(path, text, out);
      if (made !== undefined) return new OutLock(path, made);
      const found = readLock(path);
      if (found === 'gone') continue; // released between our create and our read
      if (attempt < TAKEOVER_ATTEMPTS && isStale(found, me, nowMs, path)) {
        const taken = takeOver(path, found.generation, text, out);
        if (typeof taken === 'bigint') return new OutLock(path, taken);
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
function create(path: string, text: string, out: string): bigint | undefined {
  const own = writeOwn(path, text, out);
  try {
    linkSync(own, path);
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
 * Replaces the stale lock `generation` by ours. Unlinking it and then creating ours is not atomic:
 * two runs that had both judged it stale each did so, the later unlinking the lock the earlier had
 * just made, and both wrote FILE. So one run at a time takes over a given stale lock (an exclusive
 * marker named after it), checks the lock is still that one, and renames ours over it in one step.
 * Once ours is in place the marker goes: a run that makes it again afterwards finds another lock.
 * (A run that dies between its marker and its rename leaves the stale lock held for good: the
 * refusal says to remove it.)
 */
/** Our lock's inode when won. */
function takeOver(path: string, generation: string, text: string, out: string): bigint | 'busy' | 'lost' {
  const marker = `${path}.takeover-${generation}`;
  try {
    closeSync(openSync(marker, 'wx'));
  } catch (cause) {
    if ((cause as NodeJS.ErrnoException).code === 'EEXIST') return 'busy';
    throw unwritable(out, path, cause);
  }
  try {
    if (generationOf(path) !== generation) return 'lost'; // released or taken over since it was read
    const own = writeOwn(path, text, out);
    const inode = inodeOf(own);
    try {
      renameSync(own, path);
    } catch (cause) {
      removeIfPresent(own);
      throw unwritable(out, path, cause);
    }
    return inode ?? 'lost';
  } finally {
    removeIfPresent(marker);
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

function unwritable(out: string, path: string, cause: unknown): FleetError {
  const code = (cause as NodeJS.ErrnoException).code;
  return new FleetError('INVALID_ARGUMENT', `--out ${out} cannot be written (its lock ${path}: ${code ?? (cause as Error).message})`, { cause, details: { field: 'out' } });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function removeIfPresent(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // already gone
  }
}
