// `npu-fleet publish --await | head -1` against a real, slow worker on real Redis (BullMQ): when the
// reader of the result lines goes away, publish is interrupted as by Ctrl-C (stops, removes its
// private inbox, says how far it got on stderr, exits 130) instead of crashing on EPIPE or reading
// the remaining results into a closed pipe and exiting 0 as if they had been delivered. Own file:
// the simulator reads its time model from the environment when it initialises.
import { spawn } from 'node:child_process';
import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
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
// 400 ms a batch: --in-flight 2 answers 2 requests at a time, so 40 take some 8 s.
process.env['NPU_FLEET_SIM_PROFILE'] = 'base=400ms,perItem=0ms';
const log = createLogger({ level: 'warn' });
const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

describe('npu-fleet publish --await with stdout closed by its reader', () => {
  it('is interrupted as by Ctrl-C: exit 130, its inbox removed, no EPIPE stack', { timeout: 120_000 }, async () => {
    const dir = tempDir('npu-fleet-publish-epipe-');
    const repo = join(dir, 'models');
    cpSync('examples/models/mlp-classifier', join(repo, 'mlp-classifier'), { recursive: true });
    const prefix = uniqueName('pubepipe');
    const settings = {
      transport: { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix } },
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
    const redis = new Redis(getServices().redisUrl);
    cleanup.push(async () => redis.disconnect());

    const startedAt = Date.now();
    const child = spawn(process.execPath, ['bin/npu-fleet.js', 'publish', '--config', configFile, '--model', 'mlp-classifier', '--count', '40', '--in-flight', '2', '--await'], {
      env: { ...process.env, NPU_FLEET_DEVICE: 'sim' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    cleanup.push(async () => void child.kill('SIGKILL'));
    // Like `head -1`: one result line, then the pipe's only read end is closed.
    let lines = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => {
      lines += b.toString();
      if (lines.includes('\n')) child.stdout.destroy();
    });
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    const result = await Promise.race([exited, new Promise<'no exit'>((r) => setTimeout(() => r('no exit'), 60_000))]);
    const tookMs = Date.now() - startedAt;
    expect(JSON.parse(lines.split('\n')[0] ?? '') as unknown).toMatchObject({ status: 'ok' });
    expect(stderr).not.toMatch(/Unhandled|EPIPE\n|at .*\.ts:\d+/);
    expect(result, `${stderr} after ${tookMs} ms`).toEqual({ code: 130, signal: null });
    expect(stderr).toMatch(/interrupted by stdout closing \(EPIPE\) after \d+ of \d+ result\(s\); the others were published and may still be served/);
    expect(await redis.keys(`${prefix}:*inbox*`)).toEqual([]);
  });
});
