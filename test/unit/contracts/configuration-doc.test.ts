import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { FleetConfigSchema } from '../../../src/contracts/fleet-config.ts';
import { effectiveQueueDelaysMs, ModelConfigSchema } from '../../../src/contracts/model-config.ts';

/**
 * docs/configuration.md against the schemas: every default its tables state is the schema's, and
 * every fleet setting with a default is in its reference table, so the page cannot drift from
 * src/contracts when a default or a key changes.
 */
const DOC = readFileSync('docs/configuration.md', 'utf8');

/** Settings a config must give: the doc says "required"; the test supplies them to get the rest. */
const REQUIRED = new Set(['transport.kafka.brokers', 'transport.bullmq.redisUrl']);

const UNITS: Record<string, number> = { KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3, ms: 1, h: 3_600_000, days: 86_400_000, items: 1 };

/** A Default cell's value: a number with an optional unit, true/false, a `code` string, or unset. */
function docValue(cell: string): unknown {
  const text = cell.trim();
  if (/^unset\b/.test(text)) return undefined;
  if (text === 'true' || text === 'false') return text === 'true';
  const code = /^`([^`]*)`$/.exec(text);
  if (code) return code[1] === '""' ? '' : code[1];
  const num = /^([\d,]+(?:\.\d+)?)(?:\s+(\w+))?$/.exec(text);
  if (num) {
    const unit = num[2] === undefined ? 1 : UNITS[num[2]];
    if (unit === undefined) throw new Error(`unknown unit in "${text}"`);
    return Number(num[1]?.replace(/,/g, '')) * unit;
  }
  throw new Error(`cannot read the default "${text}"`);
}

interface Row {
  readonly schema: 'fleet' | 'model';
  readonly path: string;
  readonly cell: string;
}

/** Rows of every table whose first cell names settings: `a.b`, `a.b` / `c` (c beside b), model `x`. */
function documentedRows(): Row[] {
  const rows: Row[] = [];
  for (const line of DOC.split('\n')) {
    const cells = line.split('|').slice(1, -1).map((c) => c.trim());
    const [setting, defaults] = cells;
    if (setting === undefined || defaults === undefined || !setting.includes('`')) continue;
    const schema = setting.startsWith('model ') ? 'model' : 'fleet';
    const names = [...setting.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);
    const values = names.length > 1 ? defaults.split(' / ') : [defaults];
    expect(values, `${setting}: one default per setting`).toHaveLength(names.length);
    const first = names[0] as string;
    // A unit given once for a pair ("4096 / 16384 items") belongs to both.
    const unit = /\s([A-Za-z]+)$/.exec(values[values.length - 1] ?? '')?.[1];
    names.forEach((name, i) => {
      // `queue.softLimitItems` / `hardLimitItems`: the second sits beside the first.
      const path = i === 0 || name.includes('.') ? name : [...first.split('.').slice(0, -1), name].join('.');
      const value = (values[i] as string).trim();
      rows.push({ schema, path, cell: unit !== undefined && /^[\d,]+$/.test(value) ? `${value} ${unit}` : value });
    });
  }
  return rows;
}

function leaves(value: unknown, prefix = ''): Map<string, unknown> {
  const out = new Map<string, unknown>();
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) for (const [p, leaf] of leaves(v, prefix ? `${prefix}.${k}` : k)) out.set(p, leaf);
  } else out.set(prefix, value);
  return out;
}

/** The fleet defaults: the memory fleet's, and each broker section's with only its required keys given. */
const FLEET_DEFAULTS = new Map([
  ...leaves(FleetConfigSchema.parse({})),
  ...leaves(FleetConfigSchema.parse({ transport: { kind: 'kafka', kafka: { brokers: ['k:9092'] } } }).transport, 'transport'),
  ...leaves(FleetConfigSchema.parse({ transport: { kind: 'bullmq', bullmq: { redisUrl: 'redis://r:6379' } } }).transport, 'transport'),
]);
FLEET_DEFAULTS.set('transport.kind', 'memory');

const MODEL = ModelConfigSchema.parse({
  name: 'm',
  inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }],
  outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 2] }],
});
const MODEL_DEFAULTS = leaves(MODEL);

describe('docs/configuration.md', () => {
  const rows = documentedRows();

  it('reads its tables', () => {
    expect(rows.length).toBeGreaterThan(FLEET_DEFAULTS.size);
  });

  it('states every default as the schema has it', () => {
    const wrong: string[] = [];
    for (const { schema, path, cell } of rows) {
      if (schema === 'model' && path === 'maxQueueDelayMs') {
        // "0, 5, 10, 20, ... ms by level": the delays of the first levels when none are configured.
        const stated = (/^([\d, ]+)/.exec(cell)?.[1] ?? '').split(',').map((s) => s.trim()).filter(Boolean).map(Number);
        const actual = effectiveQueueDelaysMs({ priorityLevels: stated.length, maxQueueDelayMs: undefined });
        if (JSON.stringify(stated) !== JSON.stringify(actual)) wrong.push(`model ${path}: doc ${JSON.stringify(stated)}, schema ${JSON.stringify(actual)}`);
        continue;
      }
      const defaults = schema === 'model' ? MODEL_DEFAULTS : FLEET_DEFAULTS;
      if (cell === 'required') {
        if (schema !== 'fleet' || !REQUIRED.has(path)) wrong.push(`${path}: documented as required, but the schema has a default`);
        continue;
      }
      const stated = docValue(cell);
      const actual = defaults.get(path);
      if (!defaults.has(path) && stated !== undefined) wrong.push(`${schema} ${path}: no such setting in the schema`);
      else if (stated !== actual) wrong.push(`${schema} ${path}: doc says ${JSON.stringify(stated)}, schema ${JSON.stringify(actual)}`);
    }
    expect(wrong).toEqual([]);
  });

  it('lists every fleet setting that has a default in its reference table', () => {
    const documented = new Set(rows.filter((r) => r.schema === 'fleet').map((r) => r.path));
    const missing = [...FLEET_DEFAULTS.keys()].filter((p) => !documented.has(p));
    expect(missing).toEqual([]);
  });
});
