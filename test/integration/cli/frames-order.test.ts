// `npu-fleet frames` says how many frames a consumer showing results as they arrive would show
// out of order: ok results for a frame older than one of its camera answered ok before it. On
// BullMQ with two workers a camera's frames are served by both (no per-stream partitioning), and
// kept in order by the fleet-wide claim of each camera's newest answered frame (an older frame
// served after a newer one is answered SUPERSEDED instead); on Kafka one worker serves each
// camera's partition in order. Before the claim, the BullMQ case counted 38 of 581. Real
// Kafka, real Redis, real simulated devices. Own file: the simulator reads its time model from the
// environment when it initialises.
import { appendFileSync, cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import type { z } from 'zod';
import { main } from '../../../src/cli/main.ts';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { TransportSettingsSchema } from '../../../src/contracts/fleet-config.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { runWorker } from '../../../src/runtime/worker-process.ts';
import { captureCliOutput } from '../../helpers/capture-cli-output.ts';
import { getServices, uniqueKafkaTransport, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';
// 40 ms a batch whatever its size: 4 cameras at 50 fps keep both workers busy.
process.env['NPU_FLEET_SIM_PROFILE'] = 'base=40ms,perItem=0ms';
const log = createLogger({ level: 'warn' });

const { stdout, cleanup } = captureCliOutput();

/** `workers` workers serving frames-model (latest frame wins); returns the config file. */
async function fleet(transport: z.input<typeof TransportSettingsSchema>, workers: number): Promise<string> {
  const dir = tempDir('npu-fleet-frames-order-');
  const repo = join(dir, 'models');
  cpSync('examples/models/mlp-classifier', join(repo, 'frames-model'), { recursive: true });
  const cfg = join(repo, 'frames-model', 'config.yaml');
  writeFileSync(cfg, stringify({ ...(parse(readFileSync(cfg, 'utf8')) as object), name: 'frames-model' }));
  appendFileSync(cfg, 'streams: { superseded: drop }\n');
  const settings = { transport, devices: { count: workers, backend: 'sim' }, modelRepository: repo, models: ['frames-model'], worker: { metricsPort: 0 }, log: { level: 'warn' } };
  const configFile = join(dir, 'fleet.yaml');
  writeFileSync(configFile, stringify(settings));
  for (let d = 0; d < workers; d++) {
    const worker = await runWorker(parseFleetConfig(settings), d, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
    cleanup.push(() => worker.stop());
  }
  return configFile;
}

async function frames(configFile: string): Promise<{ line: string; outOfOrder: number; ok: number }> {
  await main(['frames', '--config', configFile, '--model', 'frames-model', '--streams', '4', '--fps', '50', '--seconds', '4', '--deadline-ms', '2000']);
  const line = stdout.join('').split('\n').find((l) => l.startsWith('done: ')) ?? '';
  return { line, outOfOrder: Number(/\| out of order (\d+)$/.exec(line)?.[1] ?? NaN), ok: Number(/ ok (\d+)/.exec(line)?.[1] ?? 0) };
}

describe('frames counts results a consumer would show out of order', () => {
  it('BullMQ, two workers: none', { timeout: 120_000 }, async () => {
    const configFile = await fleet({ kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('framesorder') } }, 2);
    const s = await frames(configFile);
    expect(s.ok, s.line).toBeGreaterThan(100);
    expect(s.outOfOrder, s.line).toBe(0);
  });

  it('Kafka, one worker: none', { timeout: 120_000 }, async () => {
    const configFile = await fleet(uniqueKafkaTransport('framesorder'), 1);
    const s = await frames(configFile);
    expect(s.ok, s.line).toBeGreaterThan(100);
    expect(s.outOfOrder, s.line).toBe(0);
  });
});
