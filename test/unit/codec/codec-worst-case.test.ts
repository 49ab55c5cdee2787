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
/**
 * Budgets are multiples of the child's `referenceMs` (parsing a 64 MiB JSON string literal, timed
 * beside each decode), not wall-clock figures: a fixed 500 ms failed a CI run whose machine was
 * busy (594.6 ms for an id of 64 MiB that takes 130-160 ms on a quiet one). Here every JSON decode
 * takes 0.4-1.2 times the reference; before the structure bound, brackets took 70-110 times it.
 */
const JSON_BUDGET_REFERENCES = 4;
/** A frame header is at most limits.maxHeaderBytes (64 KiB), a thousandth of the reference's size. */
const FRAME_BUDGET_REFERENCES = 1;

interface Line {
  name: string;
  bytes: number;
  ms: number;
  referenceMs: number;
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
  it(`each ends in a FleetError naming a field or a decode, within ${HEAP_CAP_MIB} MiB of heap and a few times the cost of parsing that much JSON`, () => {
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
      console.log(`${line.name}: ${(line.bytes / 2 ** 20).toFixed(2)} MiB, ${line.ms} ms (reference ${line.referenceMs} ms), ${line.ok === true ? 'decoded' : `${line.code} ${line.field}`}`);
      expect(line.threw, line.name).toBeUndefined();
      if (want.ok) expect(line.ok, line.name).toBe(true);
      else expect({ name: line.name, code: line.code, field: line.field }).toEqual({ name: line.name, code: want.code, field: want.field });
      if (want.message) expect(line.message, line.name).toMatch(want.message);
      const budget = line.name.startsWith('frame') ? FRAME_BUDGET_REFERENCES : JSON_BUDGET_REFERENCES;
      expect(line.referenceMs, line.name).toBeGreaterThan(0);
      expect(line.ms / line.referenceMs, `${line.name}: ${line.ms} ms against a ${line.referenceMs} ms reference`).toBeLessThan(budget);
    }
  });
});
