// The Producer API through the package itself: a service that depends on npu-fleet imports
// `npu-fleet/producer` (or `npu-fleet`) from plain Node, without tsx of its own. Before, the
// package had no main/exports and the API was importable only through deep paths under tsx. A
// plain `node` in a temp dir whose node_modules/npu-fleet links to this repo, as an install would.
import { spawnSync } from 'node:child_process';
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import * as producerIndex from '../../../src/producer/index.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const SCRIPT = `
import * as root from 'npu-fleet';
import { createProducer, FleetError, MemoryProducer, parseFleetConfig, tensorView, bytesOf } from 'npu-fleet/producer';
import * as producerApi from 'npu-fleet/producer';

const out = { rootKeys: Object.keys(root).sort(), producerKeys: Object.keys(producerApi).sort() };
const config = parseFleetConfig({ transport: { kind: 'memory' } });
const producer = createProducer(config.transport, { models: ['scorer'] });
out.kind = producer.kind;
out.isMemory = producer instanceof MemoryProducer;
const request = (id, model) => ({ id, model, createdAt: Date.now(), inputs: [{ name: 'x', dtype: 'float32', shape: [1, 2], data: bytesOf(new Float32Array([1.5, -2])) }] });
await producer.publish(request('a', 'scorer'));
out.queued = producer.broker.depth('scorer.requests');
try {
  await producer.request(request('b', 'typo'), { timeoutMs: 1000 });
} catch (err) {
  out.refusal = { isFleetError: err instanceof FleetError, code: err.code, field: err.details.field };
}
await producer.close();
// A pooled Buffer (what Kafka results carry): a slice at an odd offset of a larger buffer.
const pool = Buffer.alloc(64);
const floats = Buffer.from(new Float32Array([0.25, 3, -7.5]).buffer);
floats.copy(pool, 5);
out.floats = Array.from(tensorView('float32', pool.subarray(5, 17)));
// tsx is scoped to the package: this process's own .ts files are not run through it.
writeFileSync('own.ts', 'export const x: number = 1;');
out.ownTs = await import('./own.ts').then(() => 'loaded', (e) => e.code);
console.log(JSON.stringify(out));
`.replace("writeFileSync('own.ts'", "(await import('node:fs')).writeFileSync('own.ts'");

describe('the package entry', () => {
  it('plain node imports npu-fleet/producer and npu-fleet: createProducer, FleetError, tensorView work; the names match src/producer/index.ts', { timeout: 60_000 }, () => {
    const dir = tempDir('npu-fleet-entry-');
    mkdirSync(join(dir, 'node_modules'));
    symlinkSync(resolve('.'), join(dir, 'node_modules', 'npu-fleet'), 'dir');
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'a-service', type: 'module', private: true }));
    writeFileSync(join(dir, 'main.mjs'), SCRIPT);
    const run = spawnSync(process.execPath, ['main.mjs'], { cwd: dir, encoding: 'utf8', env: { PATH: process.env['PATH'] ?? '' }, timeout: 50_000 });
    expect(run.status, run.stderr).toBe(0);
    const out = JSON.parse(run.stdout.trim().split('\n').at(-1) ?? '{}') as Record<string, unknown>;
    const runtimeNames = Object.keys(producerIndex).sort();
    expect(out['producerKeys']).toEqual(runtimeNames);
    expect(out['rootKeys']).toEqual(runtimeNames);
    expect(runtimeNames).toEqual(expect.arrayContaining(['createProducer', 'FleetError', 'tensorView', 'bytesOf', 'loadFleetConfig']));
    expect(out).toMatchObject({
      kind: 'memory',
      isMemory: true,
      queued: 1,
      refusal: { isFleetError: true, code: 'UNKNOWN_MODEL', field: 'model' },
      floats: [0.25, 3, -7.5],
      ownTs: 'ERR_UNKNOWN_FILE_EXTENSION',
    });
  });

  it('package.json names the entry and its types for both subpaths', async () => {
    const pkg = (await import('../../../package.json', { with: { type: 'json' } })).default as { main?: string; types?: string; exports?: Record<string, unknown> };
    expect(pkg.main).toBe('./lib/producer.js');
    expect(pkg.exports?.['./producer']).toEqual({ types: './src/producer/index.ts', default: './lib/producer.js' });
    expect(pkg.exports?.['.']).toEqual({ types: './src/producer/index.ts', default: './lib/producer.js' });
  });
});
