// Scoring a data set, the run SIGKILLed part-way (an OOM kill, a node lost): `--resume` finishes it
// with every line answered ok exactly once in RESULTS, sends only the lines without an ok record
// (not those already answered), and its summary adds up. The killed run's requests still in flight
// are answered to its dead inbox (BullMQ: the resumed run takes the kept job's answer instead), so
// no line gets a second record. 5,000 lines here; the 100k-200k figures are in the task report.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import type { z } from 'zod';
import { main } from '../../../src/cli/main.ts';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { TransportSettingsSchema } from '../../../src/contracts/fleet-config.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { runWorker } from '../../../src/runtime/worker-process.ts';
import { writeAffineVersion } from '../../helpers/affine-model.ts';
import { captureCliOutput } from '../../helpers/capture-cli-output.ts';
import { getServices, uniqueKafkaTransport, uniqueName } from '../../helpers/services.ts';
import { spawnCli } from '../../helpers/spawn-cli.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';
const MODEL = 'affine';
const LINES = 5_000;
const log = createLogger({ level: 'warn' });

const line = (i: number): string =>
  JSON.stringify({ id: `k${i}`, model: MODEL, inputs: [{ name: 'x', dtype: 'float32', shape: [1, 4], data: Buffer.from(Float32Array.of(i % 7, 1, 2, 3).buffer).toString('base64') }] });

interface Rec {
  id: string;
  status: string;
  line: number;
}
/** The records of RESULTS; a last line cut off by the kill is left out. */
const records = (path: string): Rec[] =>
  readFileSync(path, 'utf8')
    .split('\n')
    .flatMap((l) => {
      try {
        return [JSON.parse(l) as Rec];
      } catch {
        return [];
      }
    });
const lineCount = (path: string): number => {
  try {
    return readFileSync(path, 'utf8').split('\n').length - 1;
  } catch {
    return 0;
  }
};

const { stderr, cleanup } = captureCliOutput();

const setups: Array<{ name: string; transport: () => z.input<typeof TransportSettingsSchema> }> = [
  { name: 'Kafka', transport: () => uniqueKafkaTransport('pubkill') },
  { name: 'BullMQ', transport: () => ({ kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('pubkill') } }) },
];

describe.each(setups)('npu-fleet publish --file --await --out SIGKILLed part-way, then --resume, on $name', (setup) => {
  it('every line answered ok exactly once, the resumed run sends only the lines without an ok record, and its counts add up', { timeout: 240_000 }, async () => {
    const dir = tempDir('npu-fleet-pubkill-');
    const repository = join(dir, 'models');
    mkdirSync(join(repository, MODEL), { recursive: true });
    writeFileSync(
      join(repository, MODEL, 'config.yaml'),
      stringify({ name: MODEL, inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }], outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 4] }], maxBatchSize: 8, batchGears: [1, 2, 4, 8] }),
    );
    writeAffineVersion(join(repository, MODEL), '1', 2, 1);
    const fleet = { transport: setup.transport(), devices: { count: 1, backend: 'sim' }, modelRepository: repository, models: [MODEL], worker: { metricsPort: 0 }, log: { level: 'warn' } };
    const configFile = join(dir, 'fleet.yaml');
    writeFileSync(configFile, stringify(fleet));
    const worker = await runWorker(parseFleetConfig(fleet), 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
    cleanup.push(() => worker.stop());

    const data = join(dir, 'data.jsonl');
    writeFileSync(data, `${Array.from({ length: LINES }, (_, i) => line(i)).join('\n')}\n`);
    const out = join(dir, 'results.jsonl');
    const args = ['publish', '--config', configFile, '--file', data, '--await', '--out', out, '--in-flight', '400', '--timeout-ms', '120000'];

    // The first run, a real process, killed with no chance to tidy up once ~40 % is on disk.
    const first = spawnCli(args, { NPU_FLEET_DEVICE: 'sim' });
    cleanup.push(() => void first.child.kill('SIGKILL'));
    const deadline = Date.now() + 120_000;
    while (lineCount(out) < LINES * 0.4 && Date.now() < deadline) {
      if (first.child.exitCode !== null) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(first.child.exitCode, first.output()).toBe(null);
    first.child.kill('SIGKILL');
    expect((await first.exited).signal).toBe('SIGKILL');
    const before = records(out);
    expect(before.length).toBeGreaterThanOrEqual(LINES * 0.4);
    expect(before.length).toBeLessThan(LINES);
    const okBefore = new Set(before.filter((r) => r.status === 'ok').map((r) => r.id));
    expect(okBefore.size).toBe(before.length);

    // Resumed at once, while the killed run's last requests may still be served.
    expect(await main([...args, '--resume']), stderr.join('')).toBe(0);
    const sent = LINES - okBefore.size;
    expect(stderr.join('')).toMatch(new RegExp(`publish: ${LINES} read, ${sent} published, ${sent} ok, ${okBefore.size} skipped \\(ok in the file before\\); records in `));
    const after = records(out);
    const perId = new Map<string, number>();
    for (const r of after) perId.set(r.id, (perId.get(r.id) ?? 0) + 1);
    expect(after.filter((r) => r.status !== 'ok')).toEqual([]);
    expect(perId.size).toBe(LINES);
    expect([...perId].filter(([, n]) => n > 1)).toEqual([]);
    // Each record names its own line.
    expect(after.filter((r) => r.id !== `k${r.line - 1}`)).toEqual([]);
  });
});
