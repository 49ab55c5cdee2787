/**
 * The largest hostile inputs the default limits let through, decoded in a child process whose
 * heap is capped at 256 MiB (a worker's own heap is larger, but must not need to be: one message
 * may not cost a worker its process). Before the JSON structure bound, 64 MiB of brackets took
 * 10-17 s and 1.3-1.8 GB to parse, and 64 MiB of bad tensors ran the heap out.
 */
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const FIXTURE = join(dirname(fileURLToPath(import.meta.url)), 'fixtures/worst-case-decode.ts');
const HEAP_CAP_MIB = 256;
/** A frame header is at most limits.maxHeaderBytes (64 KiB). */
const FRAME_BUDGET_MS = 50;
/**
 * 64 MiB of JSON text is read at least once (UTF-8 to a string, ≈ 30-60 ms here) and a valid body
 * that size takes ≈ 70-90 ms to decode; what matters is that no input costs a multiple of that.
 */
const JSON_BUDGET_MS = 500;

interface Line {
  name: string;
  bytes: number;
  ms: number;
  heapMiB: number;
  ok?: boolean;
  code?: string;
  field?: string;
  message?: string;
  threw?: string;
}

const EXPECTED: Record<string, { code?: string; field?: string; message?: RegExp; ok?: true }> = {
  'json: tensors {"name":1} to the limit': { code: 'LIMIT_EXCEEDED', field: 'inputs', message: /limits\.maxHeaderBytes/ },
  'json result: outputs {"name":1} to the limit': { code: 'LIMIT_EXCEEDED', field: 'outputs', message: /limits\.maxHeaderBytes/ },
  'json: valid tensors to the limit': { code: 'LIMIT_EXCEEDED', field: 'inputs' },
  'json: meta nested to the limit': { code: 'LIMIT_EXCEEDED', field: 'meta' },
  'json: empty objects to the limit': { code: 'LIMIT_EXCEEDED', field: 'extra' },
  'json: top-level keys to the limit': { code: 'LIMIT_EXCEEDED', field: '(message)' },
  'json: zeros to the limit': { code: 'LIMIT_EXCEEDED', field: '(message)' },
  'json: an id of 64 MiB': { code: 'INVALID_MESSAGE', field: 'id' },
  'json: a shape of 32 million dimensions': { code: 'LIMIT_EXCEEDED', field: 'inputs' },
  'json: largest valid tensor (maxElementsPerTensor uint8)': { ok: true },
  'json: largest tensor, one bad base64 character': { code: 'INVALID_MESSAGE', field: 'inputs[0].data' },
  'frame: 64 KiB header of {} tensors': { code: 'LIMIT_EXCEEDED', field: 'inputs', message: /limits\.maxTensors/ },
  'frame: 64 KiB header, meta nested': { code: 'LIMIT_EXCEEDED', field: 'meta' },
  'frame: 64 KiB header of keys': { ok: true },
  'frame: largest valid tensor (maxElementsPerTensor float32)': { ok: true },
};

describe('worst inputs at the default limits', () => {
  it(`each ends in a FleetError naming a field or a decode, within ${HEAP_CAP_MIB} MiB of heap and the time budget`, () => {
    const child = spawnSync(process.execPath, [`--max-old-space-size=${HEAP_CAP_MIB}`, '--import', 'tsx', FIXTURE], {
      encoding: 'utf8',
      timeout: 120_000,
      maxBuffer: 1024 * 1024,
    });
    const lines = child.stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line);
    // A fatal heap out-of-memory ends the child with SIGABRT and the lines so far.
    expect({ status: child.status, signal: child.signal, stderr: child.stderr.split('\n').filter((l) => /FATAL|Error/.test(l)).slice(0, 3) }).toEqual({ status: 0, signal: null, stderr: [] });
    expect(lines.map((l) => l.name)).toEqual(Object.keys(EXPECTED));
    for (const line of lines) {
      const want = EXPECTED[line.name] ?? {};
      console.log(`${line.name}: ${(line.bytes / 2 ** 20).toFixed(2)} MiB, ${line.ms} ms, ${line.ok === true ? 'decoded' : `${line.code} ${line.field}`}`);
      expect(line.threw, line.name).toBeUndefined();
      if (want.ok) expect(line.ok, line.name).toBe(true);
      else expect({ name: line.name, code: line.code, field: line.field }).toEqual({ name: line.name, code: want.code, field: want.field });
      if (want.message) expect(line.message, line.name).toMatch(want.message);
      expect(line.ms, line.name).toBeLessThan(line.name.startsWith('frame') ? FRAME_BUDGET_MS : JSON_BUDGET_MS);
    }
  });
});
