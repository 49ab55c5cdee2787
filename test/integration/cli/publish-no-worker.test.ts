// `npu-fleet publish --file DATA.jsonl --await --out RESULTS.jsonl` with no worker serving the
// model: it crawled through every line as TIMEOUT, one --timeout-ms after another (exit 4 after ten
// minutes for a data set). As load and frames do, it stops once nothing has answered within
// --timeout-ms: exit 1 saying so, a record for each line read, and a --resume sends the rest.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import type { z } from 'zod';
import { main } from '../../../src/cli/main.ts';
import type { TransportSettingsSchema } from '../../../src/contracts/fleet-config.ts';
import { captureCliOutput } from '../../helpers/capture-cli-output.ts';
import { getServices, uniqueKafkaTransport, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const LINES = 3000;
const TIMEOUT_MS = 1500;

interface Rec {
  id: string;
  status: string;
  line: number;
  error?: { code: string; message: string };
}
const records = (path: string): Rec[] =>
  readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Rec);

const { stderr } = captureCliOutput();

const setups: Array<{ name: string; transport: () => z.input<typeof TransportSettingsSchema> }> = [
  { name: 'Kafka', transport: () => uniqueKafkaTransport('pubnow') },
  { name: 'BullMQ', transport: () => ({ kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('pubnow') } }) },
];

describe.each(setups)('npu-fleet publish --file --await with no worker serving, on $name', (setup) => {
  it('stops once nothing answered within --timeout-ms: exit 1 saying so, one record per line read, and --resume goes on', { timeout: 120_000 }, async () => {
    const dir = tempDir('npu-fleet-pubnow-');
    const configFile = join(dir, 'fleet.yaml');
    writeFileSync(configFile, stringify({ transport: setup.transport(), models: ['mlp-classifier'], log: { level: 'warn' } }));
    const data = join(dir, 'data.jsonl');
    const input = Buffer.alloc(256).toString('base64');
    writeFileSync(data, Array.from({ length: LINES }, (_, i) => JSON.stringify({ id: `n${i}`, model: 'mlp-classifier', inputs: [{ name: 'input', dtype: 'float32', shape: [1, 64], data: input }] })).join('\n'));
    const out = join(dir, 'results.jsonl');
    const args = ['publish', '--config', configFile, '--file', data, '--await', '--out', out, '--timeout-ms', String(TIMEOUT_MS), '--in-flight', '200'];

    const startedAt = Date.now();
    expect(await main(args)).toBe(1);
    // Not LINES / 200 timeouts one after another: it stopped after the first.
    expect(Date.now() - startedAt).toBeLessThan(30_000);
    const text = stderr.join('');
    expect(text).toMatch(/^npu-fleet: no request was answered within 1500 ms \(--timeout-ms\): stopped after \d+ of the requests read were published \(\d+ read\): is a worker serving mlp-classifier on this (kafka|bullmq) transport/m);
    expect(text).toContain(`rerun with --out ${out} --resume`);
    const first = records(out);
    expect(first.length).toBeGreaterThan(0);
    expect(first.length).toBeLessThan(LINES);
    // One record per line read, each failed: TIMEOUT if it was sent, "not sent" if it was not.
    expect(new Set(first.map((r) => r.line)).size).toBe(first.length);
    for (const r of first) expect(r.status).toBe('failed');
    expect(first.filter((r) => r.error?.code === 'TIMEOUT').length).toBeGreaterThan(0);

    // Resumed (still no worker): accepted, sends again, and stops the same way.
    stderr.splice(0);
    expect(await main([...args, '--resume'])).toBe(1);
    expect(stderr.join('')).toMatch(/no request was answered within 1500 ms/);
    expect(records(out).length).toBeGreaterThan(first.length);
  });
});
