import { createHash } from 'node:crypto';
import fs, { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { InflightJournal, inflightJournalPath, readInflightJournal, type CrashHint } from '../../../src/runtime/inflight-journal.ts';
import { predecessorNotePath } from '../../../src/runtime/predecessor-note.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

/** A crash hint of a batch that did not hang. */
const h = (suspectCount: number): CrashHint => ({ suspectCount, hung: false });

const realWriteSync = fs.writeSync;
/**
 * Makes the journal's next writes behave as on a disk that fills up: `fault` gets the bytes and
 * writes what it likes with the real writeSync (a short write) or throws (ENOSPC). The journal
 * imports writeSync by name: syncBuiltinESMExports carries the swap over to that binding.
 */
function injectWrites(fault: (fd: number, data: Buffer, position: number) => number): void {
  fs.writeSync = ((fd: number, data: string | NodeJS.ArrayBufferView, ...rest: unknown[]): number => {
    const bytes = typeof data === 'string' ? Buffer.from(data, (rest[1] as BufferEncoding | undefined) ?? 'utf8') : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    const position = typeof data === 'string' ? rest[0] : rest[2];
    const length = typeof data === 'string' ? bytes.length : ((rest[1] as number | undefined) ?? bytes.length - ((rest[0] as number | undefined) ?? 0));
    const offset = typeof data === 'string' ? 0 : ((rest[0] as number | undefined) ?? 0);
    return fault(fd, bytes.subarray(offset, offset + length), typeof position === 'number' ? position : 0);
  }) as typeof fs.writeSync;
  syncBuiltinESMExports();
}
const shortBy = (missing: number) => (fd: number, data: Buffer, position: number): number => realWriteSync(fd, data, 0, Math.max(0, data.length - missing), position);
const diskFull = (): number => {
  throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', errno: -28, syscall: 'write' });
};

afterEach(() => {
  fs.writeSync = realWriteSync;
  syncBuiltinESMExports();
});

describe('InflightJournal', () => {
  it('keeps the batches in flight; the next worker takes their ids and counts, once', () => {
    const path = join(tempDir('npu-fleet-journal-'), 'device-0.json');
    expect(new InflightJournal(path).takeCrashHints()).toEqual(new Map()); // no predecessor
    const j = new InflightJournal(path);
    j.record(['[["t/0/5",0],["t/0/6",1]]', '[["t/1/9",0]]']);
    expect(readInflightJournal(path)).toEqual({ batches: [[['t/0/5', 0], ['t/0/6', 1]], [['t/1/9', 0]]] });
    // A shorter record overwrites the longer one in place; the rest is blank.
    j.record(['[["t/1/9",0]]']);
    expect(readInflightJournal(path)).toEqual({ batches: [[['t/1/9', 0]]] });
    j.record(['[["t/0/5",0],["t/0/6",1]]', '[["t/1/9",0]]']);
    j.close();
    const next = new InflightJournal(path);
    expect(next.takeCrashHints()).toEqual(new Map([['t/0/5', h(0)], ['t/0/6', h(1)], ['t/1/9', h(0)]]));
    expect(next.takeCrashHints()).toEqual(new Map());
  });

  it('has nothing to hand over after a clean stop or a recorded hang (cleared), or when the crash tore the file', () => {
    const path = join(tempDir('npu-fleet-journal-'), 'device-0.json');
    const j = new InflightJournal(path);
    j.record(['[["a",0]]']);
    j.clear();
    j.close();
    expect(new InflightJournal(path).takeCrashHints()).toEqual(new Map());
    const reasons: string[] = [];
    writeFileSync(path, '[[["a",0],["b",0]],[["c"');
    expect(new InflightJournal(path).takeCrashHints((r) => reasons.push(r))).toEqual(new Map());
    // Unframed, as a version before the frame wrote it: whole or not, it cannot be told.
    writeFileSync(path, '[[["a",0]]]');
    expect(new InflightJournal(path).takeCrashHints((r) => reasons.push(r))).toEqual(new Map());
    expect(reasons).toEqual([expect.stringMatching(/no record header/), expect.stringMatching(/no record header/)]);
    const odd = (batches: string[]): string => {
      const w = new InflightJournal(path);
      w.record(batches);
      w.close();
      return path;
    };
    expect(new InflightJournal(odd(['{"not":"batches"}'])).takeCrashHints()).toEqual(new Map());
    expect(new InflightJournal(odd(['[["a",0],["b",-1],[7,0],"c",["d",2]]', '"e"'])).takeCrashHints()).toEqual(new Map([['a', h(0)], ['d', h(2)]]));
  });

  it('tries a journal it could not write again later: a disk full for a while does not leave it stale for good', async () => {
    const dir = join(tempDir('npu-fleet-journal-'), 'later');
    const path = join(dir, 'device-0.json');
    const errors: unknown[] = [];
    const j = new InflightJournal(path, (err) => errors.push(err), 20);
    j.record(['[["a",0]]']);
    mkdirSync(dir);
    j.record(['[["b",0]]']); // within the pause: not tried
    await new Promise((r) => setTimeout(r, 40));
    j.record(['[["c",0]]']);
    j.close();
    expect(readInflightJournal(path)).toEqual({ batches: [[['c', 0]]] });
    expect(errors).toHaveLength(1);
  });

  it('reports a journal it cannot write once, then stays out of the way', () => {
    const dir = tempDir('npu-fleet-journal-');
    const path = join(dir, 'missing-dir', 'device-0.json');
    const errors: unknown[] = [];
    const j = new InflightJournal(path, (err) => errors.push(err));
    j.record(['[["a",0]]']);
    j.record(['[["b",0]]']);
    expect(errors).toHaveLength(1);
    expect(String(errors[0])).toMatch(/ENOENT/);
  });

  it('is per fleet and device, under worker.journalDir; the memory broker has none', () => {
    const kafka = (groupId: string, journalDir = '') =>
      parseFleetConfig({ transport: { kind: 'kafka', kafka: { brokers: ['b:9092'], groupId } }, worker: { journalDir } });
    const a0 = inflightJournalPath(kafka('g1'), 0);
    expect(a0).toMatch(/npu-fleet-[0-9a-f]{16}-device-0\.inflight\.json$/);
    expect(inflightJournalPath(kafka('g1'), 1)).not.toBe(a0);
    expect(inflightJournalPath(kafka('g2'), 0)).not.toBe(a0);
    expect(inflightJournalPath(kafka('g1', '/var/lib/npu-fleet'), 0)).toMatch(/^\/var\/lib\/npu-fleet\/npu-fleet-/);
    const bullmq = parseFleetConfig({ transport: { kind: 'bullmq', bullmq: { redisUrl: 'redis://r:6379', prefix: 'p' } } });
    expect(inflightJournalPath(bullmq, 0)).not.toBe(a0);
    expect(inflightJournalPath(parseFleetConfig({}), 0)).toBeUndefined();
  });

  it('is per host too: workers of two machines sharing worker.journalDir (one network volume) keep apart', () => {
    const config = parseFleetConfig({ transport: { kind: 'kafka', kafka: { brokers: ['b:9092'], groupId: 'g' } }, worker: { journalDir: '/shared' } });
    expect(inflightJournalPath(config, 0, 'node-a')).toBe(inflightJournalPath(config, 0, 'node-a'));
    expect(inflightJournalPath(config, 0, 'node-b')).not.toBe(inflightJournalPath(config, 0, 'node-a'));
    expect(inflightJournalPath(config, 0)).toBe(inflightJournalPath(config, 0, hostname()));
  });

  it('a short write (a disk filling up mid-write) is reported, and leaves no journal naming requests that were not on the device', () => {
    const path = join(tempDir('npu-fleet-journal-'), 'device-0.json');
    const errors: unknown[] = [];
    const j = new InflightJournal(path, (err) => errors.push(err));
    j.record(['[["q/1",0]]', '[["q/2",0]]']);
    // q/1 left the device, q/3 and q/4 went on it: the record of that gets only half written.
    injectWrites(shortBy(12));
    j.record(['[["q/3",0]]', '[["q/4",1]]']);
    j.close();
    expect(errors).toHaveLength(1);
    expect(String(errors[0])).toMatch(/short write/);
    const hints = new InflightJournal(path).takeCrashHints();
    // Neither the torn mix nor the stale record: both blame requests for a crash they were not in.
    expect([...hints.keys()]).toEqual([]);
  });

  it('a disk full (ENOSPC) leaves no stale journal behind, and the journal is written again once there is room', async () => {
    const path = join(tempDir('npu-fleet-journal-'), 'device-0.json');
    const errors: unknown[] = [];
    const j = new InflightJournal(path, (err) => errors.push(err), 20);
    j.record(['[["q/1",0]]']);
    injectWrites(diskFull);
    j.record(['[["q/2",0]]']);
    expect(errors).toHaveLength(1);
    expect(String(errors[0])).toMatch(/ENOSPC/);
    // q/1 was answered long ago: a crash now must not count it.
    expect([...new InflightJournal(path).takeCrashHints().keys()]).toEqual([]);
    fs.writeSync = realWriteSync;
    syncBuiltinESMExports();
    await new Promise((r) => setTimeout(r, 40));
    j.record(['[["q/3",0]]']);
    j.close();
    expect([...new InflightJournal(path).takeCrashHints().keys()]).toEqual(['q/3']);
  });

  it('/dev/full (every write ENOSPC) is reported once and never throws', () => {
    const errors: unknown[] = [];
    const j = new InflightJournal('/dev/full', (err) => errors.push(err), 0);
    for (let i = 0; i < 3; i++) j.record([`[["q/${i}",0]]`]);
    j.close();
    expect(errors).toHaveLength(1);
    expect(String(errors[0])).toMatch(/ENOSPC/);
  });

  it('a torn journal (a new record written over an old one only in part) is detected and reported, never read as a mix of the two', () => {
    const dir = tempDir('npu-fleet-journal-');
    const bytesOf = (batches: string[]): Buffer => {
      const path = join(dir, `whole-${batches.length}.json`);
      const j = new InflightJournal(path);
      j.record(batches);
      j.close();
      return readFileSync(path);
    };
    const oldBytes = bytesOf(['[["q/1",0]]', '[["q/2",0]]']);
    const newBytes = bytesOf(['[["q/3",0]]', '[["q/4",1]]', '[["q/5",0]]']);
    const path = join(dir, 'device-0.json');
    let torn = 0;
    for (let k = 1; k < newBytes.length; k++) {
      const file = Buffer.concat([newBytes.subarray(0, k), oldBytes.subarray(Math.min(k, oldBytes.length))]);
      writeFileSync(path, file);
      const reasons: string[] = [];
      const ids = [...new InflightJournal(path).takeCrashHints((reason) => reasons.push(reason)).keys()].sort();
      expect([[], ['q/1', 'q/2']], `torn at byte ${k}: ${ids.join(' ')}`).toContainEqual(ids);
      if (ids.length === 0) {
        expect(reasons, `torn at byte ${k}`).toHaveLength(1);
        torn++;
      }
    }
    expect(torn).toBeGreaterThan(newBytes.length / 2);
  });

  it('a journal that cannot be read (a directory in its place, no read permission) is reported and ignored', () => {
    const dir = tempDir('npu-fleet-journal-');
    const reasons: string[] = [];
    expect(new InflightJournal(dir).takeCrashHints((reason) => reasons.push(reason))).toEqual(new Map());
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toMatch(/EISDIR/);
    // None at all is a first start, not a fault.
    expect(new InflightJournal(join(dir, 'none.json')).takeCrashHints((reason) => reasons.push(reason))).toEqual(new Map());
    expect(reasons).toHaveLength(1);
  });

  it('on BullMQ, is named by where Redis is (host, port, db, prefix), not by the login: a password rotation keeps the journal', () => {
    const dir = tempDir('npu-fleet-journal-');
    const at = (redisUrl: string, prefix = 'p', sentinel?: { name: string; sentinels: string[] }): string | undefined =>
      inflightJournalPath(parseFleetConfig({ transport: { kind: 'bullmq', bullmq: { redisUrl, prefix, ...(sentinel === undefined ? {} : { sentinel }) } }, worker: { journalDir: dir } }), 0, 'node-a');
    const path = at('redis://:old-secret@redis.example:6380/2');
    expect(path).toMatch(/npu-fleet-[0-9a-f]{16}-device-0\.inflight\.json$/);
    // Before: each of these moved the journal, so the worker after a password rotation lost the crash-suspect record.
    expect(at('redis://:new-secret@redis.example:6380/2')).toBe(path);
    expect(at('redis://fleet:new-secret@redis.example:6380/2')).toBe(path);
    expect(at('redis://redis.example:6380/2')).toBe(path);
    expect(at('rediss://:new-secret@REDIS.example:6380/2')).toBe(path);
    expect(at('redis://redis.example:6380/2?password=other')).toBe(path);
    // Another Redis, database or prefix is another fleet.
    for (const other of [at('redis://redis-2.example:6380/2'), at('redis://redis.example:6379/2'), at('redis://redis.example:6380/3'), at('redis://redis.example:6380/2', 'q')]) {
      expect(other).not.toBe(path);
    }
    expect(at('redis://redis.example/0')).toBe(at('redis://redis.example:6379'));
    // Sentinel: the master name and its sentinels say where, not the URL's host (never dialled).
    const s = { name: 'mymaster', sentinels: ['s1:26379', 's2:26379'] };
    const viaSentinels = at('redis://:old@ignored/2', 'p', s);
    expect(viaSentinels).not.toBe(path);
    expect(at('redis://:new@other-host/2', 'p', { ...s, sentinels: ['s2:26379', 's1:26379'] })).toBe(viaSentinels);
    expect(at('redis://:new@ignored/2', 'p', { ...s, name: 'other' })).not.toBe(viaSentinels);
    expect(at('redis://:new@ignored/2', 'p', { ...s, sentinels: ['s3:26379'] })).not.toBe(viaSentinels);
    expect(at('redis://:new@ignored/3', 'p', s)).not.toBe(viaSentinels);
  });

  it('on BullMQ, takes over the journal (and owner note) a version naming it by the whole redisUrl left, once', () => {
    const dir = tempDir('npu-fleet-journal-');
    const redisUrl = 'redis://:secret@127.0.0.1:6379/0';
    const config = parseFleetConfig({ transport: { kind: 'bullmq', bullmq: { redisUrl, prefix: 'p' } }, worker: { journalDir: dir } });
    // The name earlier versions gave it: the hash of the whole URL, password included.
    const legacyId = createHash('sha256').update(`bullmq|${redisUrl}|p|node-a`).digest('hex').slice(0, 16);
    const legacy = join(dir, `npu-fleet-${legacyId}-device-0.inflight.json`);
    const old = new InflightJournal(legacy);
    old.record(['[["q/1",2]]']);
    old.close();
    writeFileSync(predecessorNotePath(legacy), JSON.stringify({ pid: 1, host: 'node-a', note: 'n' }));

    const path = inflightJournalPath(config, 0, 'node-a');
    expect(path).not.toBe(legacy);
    expect(existsSync(legacy)).toBe(false);
    expect(existsSync(predecessorNotePath(legacy))).toBe(false);
    expect(readFileSync(predecessorNotePath(path!), 'utf8')).toContain('"note":"n"');
    expect(new InflightJournal(path!).takeCrashHints()).toEqual(new Map([['q/1', h(2)]]));
    // A journal already under the new name is never replaced by an old one.
    writeFileSync(legacy, 'stale');
    expect(inflightJournalPath(config, 0, 'node-a')).toBe(path);
    expect(readInflightJournal(path!)).toEqual({ batches: [] });
    expect(readFileSync(legacy, 'utf8')).toBe('stale');
  });
});
