import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { InflightJournal, inflightJournalPath, type CrashHint } from '../../../src/runtime/inflight-journal.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

/** A crash hint of a batch that did not hang. */
const h = (suspectCount: number): CrashHint => ({ suspectCount, hung: false });

describe('InflightJournal', () => {
  it('keeps the batches in flight; the next worker takes their ids and counts, once', () => {
    const path = join(tempDir('npu-fleet-journal-'), 'device-0.json');
    expect(new InflightJournal(path).takeCrashHints()).toEqual(new Map()); // no predecessor
    const j = new InflightJournal(path);
    j.record(['[["t/0/5",0],["t/0/6",1]]', '[["t/1/9",0]]']);
    expect(JSON.parse(readFileSync(path, 'utf8'))).toEqual([[['t/0/5', 0], ['t/0/6', 1]], [['t/1/9', 0]]]);
    // A shorter record overwrites the longer one in place; the rest is blank.
    j.record(['[["t/1/9",0]]']);
    expect(JSON.parse(readFileSync(path, 'utf8'))).toEqual([[['t/1/9', 0]]]);
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
    writeFileSync(path, '[[["a",0],["b",0]],[["c"');
    expect(new InflightJournal(path).takeCrashHints()).toEqual(new Map());
    writeFileSync(path, '{"not":"batches"}');
    expect(new InflightJournal(path).takeCrashHints()).toEqual(new Map());
    writeFileSync(path, '[[["a",0],["b",-1],[7,0],"c",["d",2]],"e"]');
    expect(new InflightJournal(path).takeCrashHints()).toEqual(new Map([['a', h(0)], ['d', h(2)]]));
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
    expect(JSON.parse(readFileSync(path, 'utf8'))).toEqual([[['c', 0]]]);
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
});
