import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, renameSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LOCK_STALE_MS, OutLock } from '../../../src/cli/out-lock.ts';
import type { FleetError } from '../../../src/errors/fleet-error.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const dir = tempDir('npu-fleet-out-lock-');
/** The pid of a process that has ended (a real one, not a guess). */
const deadPid = (): number => spawnSync(process.execPath, ['-e', '0']).pid ?? 0;

describe('OutLock (publish --out)', () => {
  it('keeps a second run off the file while the first holds it, and lets the next one in after', () => {
    const out = join(dir, 'held.jsonl');
    const lock = OutLock.take(out);
    expect(JSON.parse(readFileSync(`${out}.lock`, 'utf8'))).toEqual({ pid: process.pid, host: hostname() });
    expect(() => OutLock.take(out)).toThrow(new RegExp(`--out .*held\\.jsonl is being written by another run \\(process ${process.pid} on `));
    lock.release();
    expect(existsSync(`${out}.lock`)).toBe(false);
    OutLock.take(out).release();
  });

  it('takes over a lock left by a run that died: its process gone from this host, or an earlier process that had our pid', () => {
    const out = join(dir, 'dead.jsonl');
    const pid = deadPid();
    expect(pid).toBeGreaterThan(0);
    writeFileSync(`${out}.lock`, JSON.stringify({ pid, host: hostname() }));
    const lock = OutLock.take(out);
    expect(JSON.parse(readFileSync(`${out}.lock`, 'utf8'))).toMatchObject({ pid: process.pid });
    lock.release();
    // A container restarted after a crash often gets the same pid as the run before it.
    writeFileSync(`${out}.lock`, JSON.stringify({ pid: process.pid, host: hostname() }));
    OutLock.take(out).release();
  });

  it('a lock of another host (or unreadable) is kept while it is touched, and taken over once it is stale', () => {
    const out = join(dir, 'elsewhere.jsonl');
    writeFileSync(`${out}.lock`, JSON.stringify({ pid: 1, host: 'another-host' }));
    expect(() => OutLock.take(out)).toThrow(/being written by another run \(process 1 on another-host\): wait for it to end, or remove .*elsewhere\.jsonl\.lock/);
    const old = new Date(Date.now() - LOCK_STALE_MS - 1_000);
    utimesSync(`${out}.lock`, old, old);
    OutLock.take(out).release();
    writeFileSync(`${out}.lock`, '{"pid":');
    expect(() => OutLock.take(out)).toThrow(/being written by another run: wait/);
    utimesSync(`${out}.lock`, old, old);
    OutLock.take(out).release();
  });

  it('a run whose lock was taken over while it was away (untouched for LOCK_STALE_MS) leaves the new holder\'s lock in place when it ends', () => {
    const out = join(dir, 'taken-over.jsonl');
    const lock = OutLock.take(out);
    // A run on another host judged it stale (a suspended VM, a stalled NFS mount) and renamed its own over it.
    writeFileSync(`${out}.lock.theirs`, JSON.stringify({ pid: 1, host: 'another-host' }));
    renameSync(`${out}.lock.theirs`, `${out}.lock`);
    lock.release();
    expect(existsSync(`${out}.lock`) ? JSON.parse(readFileSync(`${out}.lock`, 'utf8')) : 'removed').toEqual({ pid: 1, host: 'another-host' });
  });

  it('a takeover marker left by a run of another host that died mid-takeover holds the stale lock only until the marker is stale too', () => {
    const out = join(dir, 'marker-elsewhere.jsonl');
    const old = new Date(Date.now() - LOCK_STALE_MS - 1_000);
    writeFileSync(`${out}.lock`, JSON.stringify({ pid: 1, host: 'another-host' }));
    utimesSync(`${out}.lock`, old, old);
    const st = statSync(`${out}.lock`, { bigint: true });
    // Its taker cannot be seen from here: the marker is judged by its age, as a lock of another host is.
    writeFileSync(`${out}.lock.takeover-${st.ino}-${st.mtimeNs}.1`, JSON.stringify({ pid: 2, host: 'another-host' }));
    expect(() => OutLock.take(out)).toThrow(/being written by another run \(process 1 on another-host\)/);
    OutLock.take(out, Date.now() + LOCK_STALE_MS + 1_000).release();
    expect(readdirSync(dir).filter((f) => f.startsWith('marker-elsewhere'))).toEqual([]);
  });
});

describe('OutLock: an --out that cannot be created', () => {
  // It said "--out nodir/x.jsonl cannot be written (its lock nodir/x.jsonl.lock: ENOENT)": the lock
  // file, not --out, and not why.
  it('names --out and its missing directory, not the lock file', () => {
    const out = join(dir, 'no-such-dir', 'x.jsonl');
    let thrown: unknown;
    try {
      OutLock.take(out).release();
    } catch (err) {
      thrown = err;
    }
    expect((thrown as FleetError).code).toBe('INVALID_ARGUMENT');
    expect((thrown as FleetError).message).toBe(`--out ${out} cannot be written: its directory ${join(dir, 'no-such-dir')} does not exist (create it, or name a file in an existing directory)`);
    expect((thrown as FleetError).details).toMatchObject({ field: 'out' });
  });

  it('names --out and the file in its way when its directory is a file', () => {
    const file = join(dir, 'a-file');
    writeFileSync(file, '');
    const out = join(file, 'x.jsonl');
    expect(() => OutLock.take(out)).toThrow(`--out ${out} cannot be written: ${file} is not a directory`);
  });
});
