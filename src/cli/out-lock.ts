import { closeSync, openSync, readFileSync, statSync, unlinkSync, utimesSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { FleetError } from '../errors/fleet-error.ts';

/** The holder touches its lock this often, so a lock left by a run that died elsewhere goes stale. */
export const LOCK_TOUCH_MS = 10_000;
/** A lock not touched for this long was left by a run that died (on another host, or a pid reused). */
export const LOCK_STALE_MS = 6 * LOCK_TOUCH_MS;

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

  private constructor(private readonly path: string) {
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
    for (let attempt = 0; ; attempt++) {
      try {
        const fd = openSync(path, 'wx');
        try {
          writeSync(fd, `${JSON.stringify(me)}\n`);
        } finally {
          closeSync(fd);
        }
        return new OutLock(path);
      } catch (cause) {
        const code = (cause as NodeJS.ErrnoException).code;
        if (code !== 'EEXIST') throw new FleetError('INVALID_ARGUMENT', `--out ${out} cannot be written (its lock ${path}: ${code ?? (cause as Error).message})`, { cause, details: { field: 'out' } });
      }
      const found = holderOf(path);
      if (found === 'gone') continue; // released between our open and our read
      if (attempt < 2 && isStale(path, found, me, nowMs)) {
        removeIfPresent(path);
        continue;
      }
      const who = found === undefined ? 'another run' : `another run (process ${found.pid} on ${found.host})`;
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
    removeIfPresent(this.path);
  }
}

function holderOf(path: string): Holder | undefined | 'gone' {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'gone';
    return undefined;
  }
  try {
    const h = JSON.parse(text) as Partial<Holder>;
    return typeof h.pid === 'number' && typeof h.host === 'string' ? { pid: h.pid, host: h.host } : undefined;
  } catch {
    return undefined; // cut off between its making and its writing: judged by its age alone
  }
}

function isStale(path: string, holder: Holder | undefined, me: Holder, nowMs: number): boolean {
  if (holder !== undefined && holder.host === me.host) {
    // Our own pid but not held here: left by an earlier process given the same pid (a container's).
    if (holder.pid === me.pid) return !heldHere.has(path);
    if (!alive(holder.pid)) return true;
  }
  try {
    return nowMs - statSync(path).mtimeMs > LOCK_STALE_MS;
  } catch {
    return true; // gone since: the next attempt makes it
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

function removeIfPresent(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // already gone
  }
}
