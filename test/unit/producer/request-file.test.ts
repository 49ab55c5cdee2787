import { createReadStream, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import { DEFAULT_LIMITS } from '../../../src/contracts/limits.ts';
import { countRequests, maxLineBytes, readLines, readRequestFile, type FileEntry, type FileLine } from '../../../src/producer/request-file.ts';
import type { FleetError } from '../../../src/errors/fleet-error.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const dir = tempDir('npu-fleet-request-file-');
const write = (name: string, text: string): string => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};
const request = (id: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  id,
  model: 'mlp-classifier',
  inputs: [{ name: 'input', dtype: 'float32', shape: [1, 2], data: Buffer.alloc(8).toString('base64') }],
  ...extra,
});
const all = async (path: string, nowMs = (): number => 1_000, limits = DEFAULT_LIMITS): Promise<FileEntry[]> => {
  const out: FileEntry[] = [];
  for await (const e of readRequestFile(path, limits, nowMs)) out.push(e);
  return out;
};
const errorOf = (e: FileEntry | undefined): FleetError => {
  if (e === undefined || !('error' in e)) throw new Error(`expected an error entry, got ${JSON.stringify(e)}`);
  return e.error;
};

describe('readRequestFile', () => {
  it('JSON Lines: one entry per non-blank line, numbered by line; a bad line is an error entry naming it, and reading goes on', async () => {
    const lines = [
      JSON.stringify(request('a')),
      '',
      '{not json',
      JSON.stringify(request('b', { inputs: [{ name: 'input', dtype: 'float32', shape: [1, 2], data: 'AAAA' }] })),
      '   ',
      `${JSON.stringify(request('c', { createdAt: 5 }))}\r`,
      JSON.stringify(request('d')),
    ];
    const entries = await all(write('set.jsonl', lines.join('\n')));
    expect(entries.map((e) => e.line)).toEqual([1, 3, 4, 6, 7]);
    const [a, bad, short, c, d] = entries;
    expect(a && 'request' in a ? a.request.id : undefined).toBe('a');
    // createdAt filled in when the line is read (it is about to be sent); one given is kept.
    expect(a && 'request' in a ? a.request.createdAt : undefined).toBe(1_000);
    expect(c && 'request' in c ? c.request.createdAt : undefined).toBe(5);
    expect(d && 'request' in d ? d.request.id : undefined).toBe('d');
    expect(errorOf(bad).message).toMatch(/^line 3 is not JSON: /);
    expect(errorOf(bad).code).toBe('INVALID_MESSAGE');
    const e = errorOf(short);
    expect(e.message).toMatch(/^line 4: inputs\[0\]\.data holds 3 bytes but float32 \[1,2\] needs 8/);
    expect(e.details).toMatchObject({ line: 4, field: 'inputs[0].data' });
    expect(short && 'error' in short ? [short.id, short.model] : []).toEqual(['b', 'mlp-classifier']);
  });

  it('a field a request does not have is an error entry naming it and the field meant, not silently dropped', async () => {
    // "deadline" for deadlineAt used to be dropped: the request scored ok with no deadline at all.
    const lines = [
      JSON.stringify(request('typo', { deadline: 5_000 })),
      JSON.stringify(request('extra', { tenant: 'a' })),
      JSON.stringify(request('fine', { deadlineAt: 5_000, meta: { tenant: 'a' } })),
    ];
    const [typo, extra, fine] = await all(write('fields.jsonl', lines.join('\n')));
    const e = errorOf(typo);
    expect(e.code).toBe('INVALID_MESSAGE');
    expect(e.message).toMatch(/^line 1: unknown field "deadline" \(did you mean "deadlineAt"\?\)/);
    expect(e.details).toMatchObject({ line: 1, field: 'deadline' });
    expect(typo && 'error' in typo ? [typo.id, typo.model] : []).toEqual(['typo', 'mlp-classifier']);
    expect(errorOf(extra).message).toMatch(/^line 2: unknown field "tenant"; a request has id, model, .*meta.*: put caller data in meta/);
    expect(fine && 'request' in fine ? fine.request.deadlineAt : undefined).toBe(5_000);
  });

  it('a dtype the fleet does not carry (float64) is named once with the dtypes it does, not listed twice', async () => {
    const [entry] = await all(write('f64.jsonl', JSON.stringify(request('f', { inputs: [{ name: 'input', dtype: 'float64', shape: [1, 1], data: Buffer.alloc(8).toString('base64') }] }))));
    const e = errorOf(entry);
    expect(e.message).toBe('line 1: inputs[0].dtype "float64" is not a dtype the fleet carries: use one of "float32", "float16", "int8", "uint8", "int32", "int64", "bool" (convert the data, e.g. float64 to float32)');
    expect(e.details).toMatchObject({ line: 1, field: 'inputs[0].dtype' });
    expect(entry && 'error' in entry ? entry.id : undefined).toBe('f');
  });

  it('reads lazily: createdAt is the time each line is pulled, not the time the file was opened', async () => {
    const path = write('lazy.ndjson', [request('x'), request('y')].map((r) => JSON.stringify(r)).join('\n'));
    let now = 10;
    const times: number[] = [];
    for await (const e of readRequestFile(path, DEFAULT_LIMITS, () => now)) {
      if ('request' in e) times.push(e.request.createdAt);
      now += 100;
    }
    expect(times).toEqual([10, 110]);
  });

  it('a .json file holds one request or an array of them; an array item that is bad is an error entry', async () => {
    const one = await all(write('one.json', JSON.stringify(request('solo'))));
    expect(one).toHaveLength(1);
    const many = await all(write('many.json', JSON.stringify([request('p'), { id: 'q' }, request('r')])));
    expect(many.map((e) => ('request' in e ? e.request.id : `error ${e.line}`))).toEqual(['p', 'error 2', 'r']);
    expect(errorOf(many[1]).message).toMatch(/^item 2: /);
  });

  it('an unreadable file, or a .json file that is not JSON, throws before anything is yielded; JSON Lines named .json get a hint', async () => {
    await expect(all(join(dir, 'missing.jsonl'))).rejects.toThrow(/--file .*missing\.jsonl cannot be read \(ENOENT\)/);
    await expect(all(join(dir, 'missing.json'))).rejects.toThrow(/--file .*missing\.json cannot be read \(ENOENT\)/);
    const linesAsJson = write('lines.json', `${JSON.stringify(request('a'))}\n${JSON.stringify(request('b'))}\n`);
    await expect(all(linesAsJson)).rejects.toThrow(/is not JSON: .*it looks like JSON Lines \(one request per line\): name it \.jsonl/);
  });

  it('a UTF-8 byte order mark (a file saved by Windows Notepad or Excel) is not part of the first request', async () => {
    const bom = '\uFEFF';
    const lines = await all(write('bom.jsonl', `${bom}${JSON.stringify(request('first'))}\r\n${JSON.stringify(request('second'))}\r\n`));
    expect(lines.map((e) => ('request' in e ? e.request.id : e.error.message))).toEqual(['first', 'second']);
    const array = await all(write('bom.json', `${bom}${JSON.stringify([request('p'), request('q')])}`));
    expect(array.map((e) => ('request' in e ? e.request.id : e.error.message))).toEqual(['p', 'q']);
    const one = await all(write('bom-one.json', `${bom}${JSON.stringify(request('solo'))}`));
    expect(one.map((e) => ('request' in e ? e.request.id : e.error.message))).toEqual(['solo']);
    expect(await countRequests(write('bom-count.json', `${bom}[{}, {}]`))).toBe(2);
    // The count sizes the first pass's filter and the progress line: the mark is no request of its own.
    const blankFirst = write('bom-blank.jsonl', `${bom}\n${JSON.stringify(request('x'))}\n${JSON.stringify(request('y'))}\n`);
    expect([await countRequests(blankFirst), (await all(blankFirst)).length]).toEqual([2, 2]);
    const onlyMark = write('bom-only.jsonl', bom);
    expect([await countRequests(onlyMark), (await all(onlyMark)).length]).toEqual([0, 0]);
  });
});

describe('countRequests', () => {
  it('counts non-blank lines of JSON Lines (with or without a final newline) and items of a JSON array', async () => {
    expect(await countRequests(write('c1.jsonl', '{"a":1}\n\n  \n{"b":2}\r\n{"c":3}'))).toBe(3);
    expect(await countRequests(write('c2.jsonl', '{"a":1}\n{"b":2}\n'))).toBe(2);
    expect(await countRequests(write('c3.jsonl', ''))).toBe(0);
    expect(await countRequests(write('c4.json', '[{}, {}, {}, {}]'))).toBe(4);
    expect(await countRequests(write('c5.json', '{}'))).toBe(1);
  });

  // The count sizes the first pass's repeat filter (2 bytes a line): counted short, every id
  // became a repeat candidate, held in memory for the run, and the progress line said "of 1".
  it('counts the lines the reader reads, whatever ends them: LF, CRLF, a lone CR (old Mac files), CR CR LF', async () => {
    const r = (id: string): string => JSON.stringify(request(id));
    const texts: Record<string, string> = {
      lf: `${r('a')}\n${r('b')}\n${r('c')}\n`,
      crlf: `${r('a')}\r\n${r('b')}\r\n\r\n${r('c')}`,
      cr: `${r('a')}\r${r('b')}\r${r('c')}\r`,
      crcrlf: `${r('a')}\r\r\n${r('b')}\r\r\n${r('c')}`,
      mixed: `${r('a')}\r${r('b')}\n \r\t\n${r('c')}\r\n`,
    };
    const counts: Record<string, [number, number]> = {};
    for (const [name, text] of Object.entries(texts)) {
      const path = write(`ends-${name}.jsonl`, text);
      counts[name] = [await countRequests(path), (await all(path)).length];
    }
    expect(counts).toEqual({ lf: [3, 3], crlf: [3, 3], cr: [3, 3], crcrlf: [3, 3], mixed: [3, 3] });
    // A lone CR at the end of one read chunk (64 KiB) and the LF at the start of the next: one line end.
    const first = r('a').padEnd(64 * 1024 - 1, ' ');
    expect(await countRequests(write('ends-chunk.jsonl', `${first}\r\n${r('b')}`))).toBe(2);
  });
});

describe('readLines', () => {
  const viaReadline = async (path: string): Promise<Array<[number, string]>> => {
    const out: Array<[number, string]> = [];
    let n = 0;
    for await (const text of createInterface({ input: createReadStream(path, { encoding: 'utf8' }), crlfDelay: Infinity })) out.push([++n, text]);
    return out;
  };
  const viaReadLines = async (path: string, cap: number, highWaterMark?: number): Promise<FileLine[]> => {
    const out: FileLine[] = [];
    for await (const l of readLines(path, cap, highWaterMark === undefined ? {} : { highWaterMark })) out.push(l);
    return out;
  };

  // The first pass (repeat-candidates), the count and the reader must number a file's lines alike:
  // a resume by line checks the lines done against the numbers the reader gives.
  it('numbers and splits lines as node:readline did (LF, CRLF, lone CR, CR CR LF; a CRLF split over two reads), whatever the read size', async () => {
    const texts = [
      'a\nb\nc\n',
      'a\r\nb\r\n\r\nc',
      'a\rb\rc\r',
      'a\r\r\nb\r\r\nc',
      'a\rb\n \r\t\nc\r\n',
      '\n\n\nx',
      '',
      '\r',
      'é€😀\r\nü',
      '{"id":"x"}\r\n{"id":"y"}\n\r\n\n',
    ];
    for (const [i, text] of texts.entries()) {
      const path = write(`split-${i}.jsonl`, text);
      const expected = await viaReadline(path);
      for (const hwm of [1, 2, 3, 7, undefined]) {
        const got = (await viaReadLines(path, 1000, hwm)).map((l) => ['text' in l ? l.line : -1, 'text' in l ? l.text : '']);
        expect({ text, hwm, got }).toEqual({ text, hwm, got: expected });
      }
    }
  });

  it('a line over the cap is reported with its length and line number, not held; the lines after it are read', async () => {
    const long = `{"id":"big","meta":{"s":"${'x'.repeat(5000)}"}}`;
    const path = write('long-line.jsonl', `{"id":"a"}\r\n${long}\r\n\n${'y'.repeat(100)}\n{"id":"b"}`);
    for (const hwm of [3, 64, undefined]) {
      const got = await viaReadLines(path, 100, hwm);
      expect(got).toEqual([
        { line: 1, text: '{"id":"a"}' },
        { line: 2, tooLongBytes: long.length },
        { line: 3, text: '' },
        { line: 4, text: 'y'.repeat(100) },
        { line: 5, text: '{"id":"b"}' },
      ]);
    }
    // A long run of blanks is a blank line, as countRequests counts it, not a request too long.
    const blanks = write('long-blank.jsonl', `{"id":"a"}\n${' \t'.repeat(500)}\n{"id":"b"}`);
    expect((await viaReadLines(blanks, 100)).map((l) => l.line)).toEqual([1, 3]);
    expect(await countRequests(blanks)).toBe(2);
  });
});

describe('readRequestFile: a line too long for any request', () => {
  // A 600 MB line crashed the run with node:readline's uncaught "RangeError: Invalid string length"
  // (no records written, RESULTS.lock left behind).
  it('is an invalid entry naming the line and the limit; the good lines around it are read', async () => {
    const limits = { ...DEFAULT_LIMITS, maxMessageBytes: 1024 };
    const cap = maxLineBytes(limits);
    expect(cap).toBeGreaterThanOrEqual(Math.ceil((1024 * 4) / 3));
    const huge = JSON.stringify(request('huge', { meta: { s: 'x'.repeat(cap * 3) } }));
    const path = write('too-long.jsonl', [JSON.stringify(request('a')), huge, JSON.stringify(request('b'))].join('\n'));
    const entries = await all(path, undefined, limits);
    expect(entries.map((e) => ('request' in e ? e.request.id : e.line))).toEqual(['a', 2, 'b']);
    const e = errorOf(entries[1]);
    expect(e.code).toBe('LIMIT_EXCEEDED');
    expect(e.message).toMatch(new RegExp(`^line 2 is ${huge.length} bytes, longer than ${cap} bytes .*limits\\.maxMessageBytes`));
    expect(e.details).toMatchObject({ line: 2 });
    expect(await countRequests(path)).toBe(3);
  });

  it('the cap keeps a line a request of limits.maxMessageBytes could need (its tensors in base64) and stays within a string', () => {
    expect(maxLineBytes({ ...DEFAULT_LIMITS, maxMessageBytes: 3000 })).toBeGreaterThan(4000 + DEFAULT_LIMITS.maxMetaBytes);
    expect(maxLineBytes({ ...DEFAULT_LIMITS, maxMessageBytes: 2 ** 31 })).toBeLessThanOrEqual(2 ** 29);
  });
});
