import { createWriteStream, readFileSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import { join } from 'node:path';
import type { WriteStream } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { readResumeState, RecordSample, ResultFile } from '../../../src/cli/publish-output.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const dir = tempDir('npu-fleet-publish-output-');
const result = (i: number): ResultEnvelope => ({
  id: `r${i}`,
  model: 'm',
  version: '1',
  status: 'ok',
  outputs: [{ name: 'y', dtype: 'float32', shape: [1, 1000], data: new Uint8Array(4000) }],
  timings: { queuedMs: 0, batchWaitMs: 0, deviceMs: 0, totalMs: 0 },
  batchSize: 1,
  gear: 1,
  device: 0,
  worker: 'w',
  completedAt: 1,
});

describe('ResultFile', () => {
  it('many records written at once while the file is behind: no listener piles up on the stream, no warning', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error): void => void warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    const path = join(dir, 'burst.jsonl');
    const file = await ResultFile.open(path, false);
    const stream = Reflect.get(file, 'stream') as WriteStream;
    const baseline = ['drain', 'close', 'error'].map((e) => stream.listenerCount(e));
    try {
      // A bulk run settles up to --in-flight replies at once; each record is ~5 KB of base64.
      for (let round = 0; round < 20; round++) await Promise.all(Array.from({ length: 50 }, (_, i) => file.write(result(round * 50 + i), round * 50 + i + 1)));
      // Every waiter once left a 'close' and an 'error' listener behind until the end of the run.
      expect(['drain', 'close', 'error'].map((e) => stream.listenerCount(e))).toEqual(baseline);
      await file.close();
      await new Promise((r) => setTimeout(r, 50));
      expect(warnings).toEqual([]);
      expect(readFileSync(path, 'utf8').trim().split('\n')).toHaveLength(1000);
    } finally {
      process.off('warning', onWarning);
    }
  });
});

describe('readResumeState (--resume)', () => {
  const okLine = (id: string, line?: number): string => JSON.stringify({ id, model: 'm', version: '1', status: 'ok', ...(line === undefined ? {} : { line }) });

  it('each record names the line it answers, and a resume by line finds exactly the lines done', async () => {
    const path = join(dir, 'lines.jsonl');
    const file = await ResultFile.open(path, false);
    await file.write(result(1), 3);
    await file.write({ ...result(2), status: 'failed' }, 1);
    await file.write(result(3), 7);
    await file.close();
    writeFileSync(path, `${readFileSync(path, 'utf8')}{"id":"r4","st`);
    expect(readFileSync(path, 'utf8').split('\n').slice(0, 3).map((l) => (JSON.parse(l) as { line: number }).line)).toEqual([3, 1, 7]);
    const state = await readResumeState(path, { byLine: true });
    expect(state).toMatchObject({ okCount: 2, unreadable: 1 });
    expect(state.note).toBeUndefined();
    expect([1, 2, 3, 4, 5, 6, 7, 8].filter((line) => state.done.isDone(line, 'any'))).toEqual([3, 7]);
    // The data set as recorded (line 3 holds r1, line 7 r3) matches; one edited since does not.
    const check = async (ids: ReadonlyMap<number, string>): Promise<boolean | undefined> => {
      const fresh = await readResumeState(path, { byLine: true });
      for (const [line, id] of ids) fresh.lines?.checkInput(line, id);
      return fresh.lines?.inputMatches();
    };
    const asRecorded = new Map([[1, 'r2'], [2, 'x'], [3, 'r1'], [7, 'r3']]);
    expect(await check(asRecorded)).toBe(true);
    expect(await check(new Map([...asRecorded, [3, 'r9']]))).toBe(false);
  });

  it('a file written by an earlier version (no line in its records) is read by id, with a note', async () => {
    const path = join(dir, 'legacy.jsonl');
    writeFileSync(path, [okLine('a', 1), okLine('b'), JSON.stringify({ id: 'c', status: 'failed' }), 'cut off'].join('\n'));
    const state = await readResumeState(path, { byLine: true });
    expect(state.lines).toBeUndefined();
    expect(state).toMatchObject({ okCount: 2, unreadable: 1 });
    expect(state.note).toMatch(/holds results without their line \(written by an earlier version\): resuming by id/);
    expect(['a', 'b', 'c'].map((id) => state.done.isDone(99, id))).toEqual([true, true, false]);
  });

  // An editor saving the file as "UTF-8 with BOM" puts U+FEFF before the first record: read as
  // part of it, that record was not JSON, and --resume sent its line again.
  it('a byte order mark before the first record (the file saved by an editor) does not make that record unreadable', async () => {
    const path = join(dir, 'bom.jsonl');
    writeFileSync(path, `\uFEFF${okLine('a', 1)}\r\n${okLine('b', 2)}\r\n`);
    const byLine = await readResumeState(path, { byLine: true });
    expect(byLine).toMatchObject({ okCount: 2, unreadable: 0 });
    expect([1, 2, 3].map((line) => byLine.done.isDone(line, 'any'))).toEqual([true, true, false]);
    const byId = await readResumeState(path, { byLine: false });
    expect(byId).toMatchObject({ okCount: 2, unreadable: 0 });
    expect(['a', 'b'].map((id) => byId.done.isDone(0, id))).toEqual([true, true]);
    // ResultFile.open reads a resumed file the same way (by id, when not given what was read).
    const file = await ResultFile.open(path, true);
    await file.close();
    expect([file.unreadable, file.done.isDone(0, 'a')]).toEqual([0, true]);
  });

  it('resuming a long run by line holds a bit per line, not every id done (~100 B each)', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const heapAfterGc = (): number => {
      gc();
      gc();
      return process.memoryUsage().heapUsed;
    };
    const path = join(dir, 'long.jsonl');
    const n = 300_000;
    const pad = 'x'.repeat(40);
    const stream = createWriteStream(path);
    for (let i = 1; i <= n; i++) if (!stream.write(`${okLine(`${pad}-${i}`, i)}\n`)) await once(stream, 'drain');
    await new Promise<void>((resolve) => stream.end(() => resolve()));
    const before = heapAfterGc();
    const state = await readResumeState(path, { byLine: true });
    const held = heapAfterGc() - before;
    expect(state.okCount).toBe(n);
    expect(state.done.isDone(n, `${pad}-${n}`)).toBe(true);
    // 300,000 ids of 47 characters in a Set were over 20 MB; 300,000 bits are 37 KB.
    expect(held).toBeLessThan(2 * 1024 * 1024);
  }, 60_000);
});

describe('RecordSample', () => {
  it('keeps every id up to its size, then a sample picked across the file; refuses only when none is in the data file', () => {
    const small = new RecordSample(4);
    for (let i = 0; i < 3; i++) small.add(`r${i}`);
    expect([small.records, small.checked, small.has('r2'), small.has('x')]).toEqual([3, 3, true, false]);
    expect(small.refusal('R.jsonl', 'D.jsonl', 1, 'line')).toBeUndefined();
    expect(small.refusal('R.jsonl', 'D.jsonl', 0, 'line')?.message).toBe(
      '--out R.jsonl was written for another file: none of its 3 records matches a line of D.jsonl (wrong --out or --file?); nothing was sent: name the --out written for this file, or a new one',
    );
    const big = new RecordSample(4);
    for (let i = 0; i < 1000; i++) big.add(`r${i}`);
    expect([big.records, big.checked]).toEqual([1000, 4]);
    // Picked across the file, not its first four.
    expect(Array.from({ length: 1000 }, (_, i) => `r${i}`).filter((id) => big.has(id)).some((id) => Number(id.slice(1)) >= 4)).toBe(true);
    expect(big.refusal('R.jsonl', 'D.json', 0, 'item')?.message).toMatch(/^--out R\.jsonl was written for another file: none of 4 of its 1000 records \(picked across it\) matches an item of D\.json/);
    expect(new RecordSample(4).refusal('R.jsonl', 'D.jsonl', 0, 'line')).toBeUndefined();
  });
});
