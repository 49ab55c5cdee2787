import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { bulkPublish } from '../../../src/producer/bulk-publish.ts';
import type { Producer } from '../../../src/producer/producer.ts';
import { findRepeatCandidates, IdFilter, NO_ID_REPEATS } from '../../../src/producer/repeat-candidates.ts';
import type { FileEntry } from '../../../src/producer/request-file.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const req = (id: string): RequestEnvelope => ({ id, model: 'm', createdAt: 1, inputs: [] });

/** Fire and forget that keeps only the ids it was given (when asked to). */
function publisher(keep: boolean): Pick<Producer, 'publish' | 'requestMany'> & { published: string[] } {
  const published: string[] = [];
  return {
    published,
    publish: (requests: RequestEnvelope | readonly RequestEnvelope[]): Promise<void> => {
      if (keep) for (const r of Array.isArray(requests) ? requests : [requests as RequestEnvelope]) published.push(r.id);
      return Promise.resolve();
    },
    requestMany: () => {
      throw new Error('not awaiting');
    },
  };
}

describe('findRepeatCandidates', () => {
  it('every id on more than one line is a candidate (a BOM, blank lines, lines not JSON, ids not strings around them); few unique ids are', async () => {
    const dir = tempDir('repeat-candidates');
    const path = join(dir, 'data.jsonl');
    const n = 50_000;
    const lines = Array.from({ length: n }, (_, i) => JSON.stringify({ id: `u-${i}`, model: 'm' }));
    // Repeats far apart, next to each other, and three times.
    lines.push(JSON.stringify({ id: 'u-7', model: 'm' }), JSON.stringify({ id: 'u-49999' }), JSON.stringify({ id: 'u-123' }), JSON.stringify({ id: 'u-123' }));
    lines.splice(100, 0, '', 'not json', JSON.stringify({ id: 5 }), JSON.stringify([1]), 'null');
    writeFileSync(path, `\uFEFF${lines.join('\n')}\n`);
    const repeats = await findRepeatCandidates(path, n + 4);
    expect(['u-7', 'u-49999', 'u-123'].every((id) => repeats.mayRepeat(id))).toBe(true);
    let falseCandidates = 0;
    for (let i = 0; i < n; i++) if (![7, 123, 49999].includes(i) && repeats.mayRepeat(`u-${i}`)) falseCandidates++;
    // 14 bits per id: about 0.1 %.
    expect(falseCandidates).toBeLessThan(n * 0.005);
  });

  it('a false candidate never costs a line: with a filter far too small (most ids candidates) only the real repeat is refused', async () => {
    const dir = tempDir('repeat-candidates');
    const path = join(dir, 'data.jsonl');
    const ids = Array.from({ length: 2_000 }, (_, i) => `id-${i}`);
    ids.splice(1_500, 0, 'id-3');
    writeFileSync(path, ids.map((id) => JSON.stringify({ id })).join('\n'));
    const repeats = await findRepeatCandidates(path, 10, { bitsPerId: 1 });
    expect(ids.filter((id) => repeats.mayRepeat(id)).length).toBeGreaterThan(1_000);
    const producer = publisher(true);
    const records: ResultEnvelope[] = [];
    async function* entries(): AsyncGenerator<FileEntry> {
      for (let i = 0; i < ids.length; i++) yield { line: i + 1, request: req(ids[i] as string) };
    }
    const stats = await bulkPublish({ producer, entries: entries(), awaitReplies: false, timeoutMs: 1_000, repeats, onRecord: (r) => void records.push(r) });
    expect(stats).toMatchObject({ read: 2_001, published: 2_000, invalidEntries: 1 });
    expect(new Set(producer.published).size).toBe(2_000);
    expect(records.map((r) => r.error?.message)).toEqual(['line 1501: id "id-3" repeats line 4; ids must be unique in a run (replies are matched by id)']);
  });

  it('IdFilter: an id added is seen when added again', () => {
    const f = new IdFilter(1_000, 14);
    expect(f.addSeen('a')).toBe(false);
    expect(f.addSeen('a')).toBe(true);
    expect(f.addSeen('b')).toBe(false);
  });
});

describe('findRepeatCandidates over readLines (a line over the cap is passed over unheld)', () => {
  it("numbers lines as the reader does, passes over a line over the cap, and finds the repeats", async () => {
    const text = `\uFEFF{"id":"a"}\r\n{"id":"${'x'.repeat(500)}"}\r{"id":"b"}\n\n{"id":"a"}\r\n{"id":"c"}`;
    const path = join(tempDir('repeat-candidates'), 'first-pass.jsonl');
    writeFileSync(path, text);
    const seen: Array<[number, string]> = [];
    const repeats = await findRepeatCandidates(path, 10, { maxBytes: 100, onId: (line, id) => seen.push([line, id]) });
    expect(seen).toEqual([
      [1, 'a'],
      [3, 'b'],
      [5, 'a'],
      [6, 'c'],
    ]);
    expect(repeats.mayRepeat('a')).toBe(true);
  });

  it('names the models of the lines it reads (publish checks --priority against each before sending)', async () => {
    const path = join(tempDir('repeat-candidates'), 'models.jsonl');
    writeFileSync(path, [JSON.stringify({ id: 'a', model: 'm1' }), JSON.stringify({ id: 'b', model: 'm2' }), JSON.stringify({ model: 'm3' }), 'not json'].join('\n'));
    const models: string[] = [];
    await findRepeatCandidates(path, 4, { onModel: (m) => models.push(m) });
    expect(models).toEqual(['m1', 'm2', 'm3']);
  });
});

describe('bulkPublish memory over a long run', () => {
  it('remembers no id that cannot repeat: the heap does not grow with the lines published (it held every id, ~100 B each)', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const heapAfterGc = (): number => {
      gc();
      gc();
      return process.memoryUsage().heapUsed;
    };
    const n = 300_000;
    const pad = 'x'.repeat(80);
    let heapAt20k = 0;
    let heapAtEnd = 0;
    async function* entries(): AsyncGenerator<FileEntry> {
      for (let i = 0; i < n; i++) {
        if (i === 20_000) heapAt20k = heapAfterGc();
        if (i === n - 1) heapAtEnd = heapAfterGc();
        yield { line: i + 1, request: req(`${pad}-${i}`) };
      }
    }
    const stats = await bulkPublish({ producer: publisher(false), entries: entries(), awaitReplies: false, timeoutMs: 1_000, repeats: NO_ID_REPEATS, onRecord: () => undefined });
    expect(stats.published).toBe(n);
    // 280,000 ids of 86 characters held would be over 25 MB.
    expect(heapAtEnd - heapAt20k).toBeLessThan(5 * 1024 * 1024);
  }, 60_000);
});
