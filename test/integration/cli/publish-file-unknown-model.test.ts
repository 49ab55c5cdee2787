// `npu-fleet publish --file DATA.jsonl --await --out RESULTS.jsonl` with a line naming a model the
// fleet does not have: no worker reads that model's queue or topic, so sent, it waited out the
// whole --timeout-ms (30 s by default) and came back `failed: TIMEOUT` with neither its line nor
// the field in the message, leaving a job nobody reads on BullMQ and a new request topic on Kafka.
// With the repository at hand it is refused before sending, as an invalid record naming both.
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
import { tempDir } from '../../helpers/temp-dir.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';
const MODEL = 'affine';
/** Long enough that a run which sent the bad line is told apart from one that did not. */
const TIMEOUT_MS = 20_000;
const log = createLogger({ level: 'warn' });

function writeModel(repository: string, name: string): void {
  mkdirSync(join(repository, name), { recursive: true });
  writeFileSync(
    join(repository, name, 'config.yaml'),
    stringify({ name, inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }], outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 4] }], maxBatchSize: 8, batchGears: [1, 2, 4, 8] }),
  );
  writeAffineVersion(join(repository, name), '1', 2, 1);
}

const line = (id: string, model: string): string =>
  JSON.stringify({ id, model, inputs: [{ name: 'x', dtype: 'float32', shape: [1, 4], data: Buffer.from(Float32Array.of(1, 2, 3, 4).buffer).toString('base64') }] });

interface Rec {
  id: string;
  status: string;
  line: number;
  error?: { code: string; message: string };
}

const { stderr, cleanup } = captureCliOutput();

const setups: Array<{ name: string; transport: () => z.input<typeof TransportSettingsSchema> }> = [
  { name: 'Kafka', transport: () => uniqueKafkaTransport('pubunk') },
  { name: 'BullMQ', transport: () => ({ kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('pubunk') } }) },
];

describe.each(setups)('npu-fleet publish --file with a line for a model the fleet lacks, on $name', (setup) => {
  it('is refused before sending: an invalid record naming the line and the model field, at once; the good lines are all scored', { timeout: 120_000 }, async () => {
    const dir = tempDir('npu-fleet-pubunk-');
    const repository = join(dir, 'models');
    writeModel(repository, MODEL);
    // In the repository but left out of `models`: the fleet does not serve it either.
    writeModel(repository, 'unserved');
    const fleet = { transport: setup.transport(), devices: { count: 1, backend: 'sim' }, modelRepository: repository, models: [MODEL], worker: { metricsPort: 0 }, log: { level: 'warn' } };
    const configFile = join(dir, 'fleet.yaml');
    writeFileSync(configFile, stringify(fleet));
    const worker = await runWorker(parseFleetConfig(fleet), 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
    cleanup.push(() => worker.stop());

    const lines = Array.from({ length: 30 }, (_, i) => line(`g${i}`, MODEL));
    lines.splice(7, 0, line('typo', 'afine'));
    lines.splice(15, 0, line('left-out', 'unserved'));
    const data = join(dir, 'data.jsonl');
    writeFileSync(data, `${lines.join('\n')}\n`);
    const out = join(dir, 'results.jsonl');

    const startedAt = Date.now();
    const code = await main(['publish', '--config', configFile, '--file', data, '--await', '--out', out, '--in-flight', '8', '--timeout-ms', String(TIMEOUT_MS)]);
    const tookMs = Date.now() - startedAt;
    // The run went through with lines refused: 4, not 1 (stopped on an error).
    expect(code, stderr.join('')).toBe(4);
    const recs = readFileSync(out, 'utf8')
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => JSON.parse(l) as Rec);
    expect(recs.filter((r) => r.status === 'ok').map((r) => r.id).sort()).toEqual(Array.from({ length: 30 }, (_, i) => `g${i}`).sort());
    const bad = recs.filter((r) => r.status !== 'ok').sort((a, b) => a.line - b.line);
    expect(bad.map((r) => [r.id, r.status, r.line, r.error?.code])).toEqual([
      ['typo', 'invalid', 8, 'UNKNOWN_MODEL'],
      ['left-out', 'invalid', 16, 'UNKNOWN_MODEL'],
    ]);
    expect(bad[0]?.error?.message).toMatch(/^line 8: model: "afine" is not served by this fleet \(not in its config's models; served: affine\): no worker would read it/);
    expect(bad[1]?.error?.message).toMatch(/^line 16: model: "unserved" is not served by this fleet \(not in its config's models; served: affine\): no worker would read it/);
    expect(stderr.join('')).toMatch(/publish: 32 read, 30 published, 30 ok, 2 refused before sending \(invalid\)/);
    // Not sent: the run did not wait out the bad lines' timeout.
    expect(tookMs).toBeLessThan(TIMEOUT_MS);
  });
});
