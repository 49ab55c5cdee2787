// `npu-fleet load | head -1` against a real worker on real Redis (BullMQ): when stdout's reader goes
// away, load stops as on Ctrl-C (waits for the replies still out, exits 0) instead of crashing on
// EPIPE or sending on, unwatched, to the end of --seconds.
import { spawn } from 'node:child_process';
import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { runWorker } from '../../../src/runtime/worker-process.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';
const log = createLogger({ level: 'warn' });
const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

describe('npu-fleet load with stdout closed by its reader', () => {
  it('stops as on Ctrl-C and exits 0 long before --seconds, without an EPIPE stack', { timeout: 120_000 }, async () => {
    const dir = tempDir('npu-fleet-load-epipe-');
    const repo = join(dir, 'models');
    cpSync('examples/models/mlp-classifier', join(repo, 'mlp-classifier'), { recursive: true });
    const settings = {
      transport: { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('loadepipe') } },
      devices: { count: 1, backend: 'sim' },
      modelRepository: repo,
      models: ['mlp-classifier'],
      worker: { metricsPort: 0 },
      log: { level: 'warn' },
    };
    const configFile = join(dir, 'fleet.yaml');
    writeFileSync(configFile, stringify(settings));
    const worker = await runWorker(parseFleetConfig(settings), 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
    cleanup.push(() => worker.stop());

    const startedAt = Date.now();
    const child = spawn(process.execPath, ['bin/npu-fleet.js', 'load', '--config', configFile, '--model', 'mlp-classifier', '--rate', '50', '--seconds', '60', '--deadline-ms', '5000'], {
      env: { ...process.env, NPU_FLEET_DEVICE: 'sim' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    cleanup.push(async () => void child.kill('SIGKILL'));
    // Like `head -2`: the title and the first progress line (sent and answered), then the pipe's
    // only read end is closed; the next progress line a second later meets EPIPE.
    let lines = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => {
      lines += b.toString();
      if (lines.split('\n').length > 2) child.stdout.destroy();
    });
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    const result = await Promise.race([exited, new Promise<'no exit'>((r) => setTimeout(() => r('no exit'), 30_000))]);
    expect(lines).toMatch(/^load: 50 req\/s of mlp-classifier for 60 s \(bullmq\)\n/);
    expect(stderr).not.toMatch(/Unhandled|EPIPE\n|at .*\.ts:\d+/);
    expect(result, `${stderr} after ${Date.now() - startedAt} ms`).toEqual({ code: 0, signal: null });
    expect(stderr).toMatch(/stdout closed \(EPIPE\): stopping the load as on Ctrl-C/);
  });
});
