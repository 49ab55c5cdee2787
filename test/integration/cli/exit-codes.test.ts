// Exit codes of `npu-fleet publish` and `npu-fleet load` (src/cli/exit-codes.ts), on a real Redis
// (BullMQ) and a real worker: a script must tell "the run stopped on an error" (1) from "the run
// went through, but not every request got its answer" (4), and for load "nothing was answered"
// (1: no fleet there) from "some got no answer" (4). Own file: the worker runs the simulator.
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { parse, stringify } from 'yaml';
import { EXIT } from '../../../src/cli/exit-codes.ts';
import { main } from '../../../src/cli/main.ts';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { runWorker } from '../../../src/runtime/worker-process.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';
const log = createLogger({ level: 'warn' });

let stdout = '';
let stderr = '';
const cleanup: Array<() => Promise<unknown> | void> = [];
beforeEach(() => {
  stdout = '';
  stderr = '';
  vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => ((stdout += String(chunk)), true));
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => ((stderr += String(chunk)), true));
});
afterEach(async () => {
  vi.restoreAllMocks();
  for (const c of cleanup.splice(0).reverse()) await c();
});

/**
 * A repository of mlp-classifier and `unserved` (the same model under another name), and one
 * worker serving mlp-classifier only: `unserved`'s requests are never answered. Returns the config.
 */
async function fleetServingOneOfTwo(): Promise<string> {
  const dir = tempDir('npu-fleet-exitcodes-');
  const repo = join(dir, 'models');
  cpSync('examples/models/mlp-classifier', join(repo, 'mlp-classifier'), { recursive: true });
  cpSync('examples/models/mlp-classifier', join(repo, 'unserved'), { recursive: true });
  const cfg = join(repo, 'unserved', 'config.yaml');
  writeFileSync(cfg, stringify({ ...(parse(readFileSync(cfg, 'utf8')) as Record<string, unknown>), name: 'unserved' }));
  const transport = { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('exitcodes') } };
  const settings = { transport, devices: { count: 1, backend: 'sim' }, modelRepository: repo, models: ['mlp-classifier'], worker: { metricsPort: 0 }, log: { level: 'warn' } };
  const worker = await runWorker(parseFleetConfig(settings), 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
  cleanup.push(() => worker.stop());
  const configFile = join(dir, 'fleet.yaml');
  // publish refuses a model outside `models`; load does not look (it may drive any model of the repository).
  writeFileSync(configFile, stringify({ ...settings, models: undefined }));
  return configFile;
}

/** A data set of `good` mlp-classifier requests (64 features), and a line that is not JSON after the first. */
function dataSet(dir: string, good: number): string {
  const x = Buffer.from(new Float32Array(64).buffer).toString('base64');
  const lines = Array.from({ length: good }, (_, i) => JSON.stringify({ id: uniqueName(`r${i}`), model: 'mlp-classifier', inputs: [{ name: 'input', dtype: 'float32', shape: [1, 64], data: x }] }));
  lines.splice(1, 0, '{"id": "broken"');
  const file = join(dir, `${uniqueName('data')}.jsonl`);
  writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

async function closedPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const port = (probe.address() as { port: number }).port;
  await new Promise<void>((r) => probe.close(() => r()));
  return port;
}

describe('exit codes of publish and load', () => {
  it('the scheme: 0 ok, 1 failed, 2 usage, 3 only expired (dlq), 4 not every request answered, 130 interrupted', () => {
    expect(EXIT).toMatchObject({ ok: 0, failed: 1, usage: 2, onlyExpired: 3, notAllAnswered: 4, interrupted: 130 });
  });

  it('publish --file: a line refused (fire and forget) or a result not ok (--await) exits 4; stopped on an error exits 1', { timeout: 120_000 }, async () => {
    const configFile = await fleetServingOneOfTwo();
    const dir = tempDir('npu-fleet-exitcodes-data-');
    const data = dataSet(dir, 5);

    // Fire and forget: the 5 good lines go out, the broken one is an invalid record. Before: 1.
    expect(await main(['publish', '--config', configFile, '--file', data]), stderr).toBe(EXIT.notAllAnswered);
    expect(stdout).toMatch(/published 5 request\(s\)/);

    // Awaited: 5 ok, 1 invalid. Before: 1, as for a run stopped on an error.
    stdout = '';
    stderr = '';
    expect(await main(['publish', '--config', configFile, '--file', dataSet(dir, 5), '--await', '--out', join(dir, 'results.jsonl'), '--timeout-ms', '60000']), stderr).toBe(EXIT.notAllAnswered);
    expect(stderr).toMatch(/5 ok, 1 refused before sending \(invalid\)/);

    // Stopped on an error: Redis not there.
    stderr = '';
    const gone = join(dir, 'gone.yaml');
    const port = await closedPort();
    writeFileSync(gone, stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl: `redis://127.0.0.1:${port}`, prefix: uniqueName('gone'), connectTimeoutMs: 1_000 } }, modelRepository: 'examples/models', log: { level: 'silent' } }));
    expect(await main(['publish', '--config', gone, '--file', data, '--await', '--timeout-ms', '60000']), stderr).toBe(EXIT.failed);
    expect(stderr).toMatch(/publishing stopped after .*Redis at 127\.0\.0\.1:\d+/);
  });

  it('load: some requests without an answer exits 4, saying how many; nothing answered stays 1', { timeout: 120_000 }, async () => {
    const configFile = await fleetServingOneOfTwo();
    const code = await main(['load', '--config', configFile, '--model', 'mlp-classifier,unserved', '--rate', '20', '--seconds', '1', '--deadline-ms', '5000', '--timeout-ms', '1500', '--drain-ms', '3000']);
    const summary = stdout.split('\n').find((l) => l.startsWith('done: ')) ?? stdout;
    expect(summary).toMatch(/^done: sent 20 \| ok 10 no reply 10 \|/);
    // Before: 0, as if every request had been answered.
    expect(code, stderr).toBe(EXIT.notAllAnswered);
    expect(stderr).toMatch(/10 of 20 request\(s\) got no answer/);

    stdout = '';
    stderr = '';
    expect(await main(['load', '--config', configFile, '--model', 'unserved', '--rate', '20', '--seconds', '1', '--timeout-ms', '500', '--drain-ms', '1000'])).toBe(EXIT.failed);
    expect(stderr).toMatch(/no request was answered/);
  });
});
