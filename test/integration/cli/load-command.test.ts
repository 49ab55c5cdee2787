// `npu-fleet load` and `npu-fleet frames` against a real worker on a real Kafka and a real Redis
// (BullMQ): the open loop sends at the asked rate, every request sent is accounted for in the
// summary (answered by outcome, or no reply), and frames of a model that drops superseded frames
// come back partly superseded when the device is slower than the cameras. Own file: the simulator
// reads its time model from the environment when it initialises.
import { appendFileSync, cpSync, writeFileSync } from 'node:fs';
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
import { captureCliOutput } from '../../helpers/capture-cli-output.ts';
import { getServices, uniqueKafkaTransport, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';
// 10 ms a batch whatever its size: load at 200 req/s batches easily; 3 cameras at 200 fps do not fit.
process.env['NPU_FLEET_SIM_PROFILE'] = 'base=10ms,perItem=0ms';
const log = createLogger({ level: 'warn' });

const { stdout, stderr, cleanup } = captureCliOutput();

const setups: Array<{ name: string; transport: () => z.input<typeof TransportSettingsSchema> }> = [
  { name: 'Kafka', transport: () => uniqueKafkaTransport('loadcmd') },
  { name: 'BullMQ', transport: () => ({ kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('loadcmd') } }) },
];

/** A fleet of one worker serving mlp-classifier, and `frames-model` (the same, latest frame wins). */
async function fleet(transport: z.input<typeof TransportSettingsSchema>): Promise<string> {
  const dir = tempDir('npu-fleet-loadcmd-');
  const repo = join(dir, 'models');
  cpSync('examples/models/mlp-classifier', join(repo, 'mlp-classifier'), { recursive: true });
  cpSync('examples/models/mlp-classifier', join(repo, 'frames-model'), { recursive: true });
  const cfg = join(repo, 'frames-model', 'config.yaml');
  writeFileSync(cfg, stringify({ ...(await import('yaml')).parse((await import('node:fs')).readFileSync(cfg, 'utf8')), name: 'frames-model' }));
  appendFileSync(cfg, 'streams: { superseded: drop }\n');
  const settings = { transport, devices: { count: 1, backend: 'sim' }, modelRepository: repo, models: ['mlp-classifier', 'frames-model'], worker: { metricsPort: 0 }, log: { level: 'warn' } };
  const configFile = join(dir, 'fleet.yaml');
  writeFileSync(configFile, stringify(settings));
  const worker = await runWorker(parseFleetConfig(settings), 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
  cleanup.push(() => worker.stop());
  return configFile;
}

/** The summary line's counts: `done: sent N | ok A late B ... | ok latency ...`. */
function summary(): { sent: number; counts: Map<string, number>; line: string } {
  const line = stdout.join('').split('\n').find((l) => l.startsWith('done: ')) ?? '';
  const sent = Number(/sent (\d+)/.exec(line)?.[1] ?? NaN);
  const counts = new Map<string, number>();
  const part = line.split(' | ')[1] ?? '';
  for (const m of part.matchAll(/([a-z][a-z ]*?) (\d+)/g)) counts.set((m[1] ?? '').trim(), Number(m[2]));
  return { sent, counts, line };
}

describe.each(setups)('load generators on $name', (setup) => {
  it('load: 200 req/s for 2 s; every request accounted for, progress each second', { timeout: 120_000 }, async () => {
    const configFile = await fleet(setup.transport());
    expect(await main(['load', '--config', configFile, '--model', 'mlp-classifier', '--rate', '200', '--seconds', '2', '--deadline-ms', '2000'])).toBe(0);
    const out = stdout.join('');
    expect(out).toMatch(/^load: 200 req\/s of mlp-classifier for 2 s \((kafka|bullmq)\)\n/);
    expect(out).toMatch(/sent \d+\/s \| answered \d+\/s \| ok p50 [\d.]+ ms p99 [\d.]+ ms \| batch fill \d+% \| /);
    const s = summary();
    expect(s.sent, s.line).toBe(400);
    expect([...s.counts.values()].reduce((a, b) => a + b, 0), s.line).toBe(400);
    expect(s.counts.get('ok') ?? 0, s.line).toBeGreaterThan(360);
    expect(s.counts.has('no reply'), s.line).toBe(false);
    expect(s.line).toMatch(/ok latency p50 [\d.]+ ms, p95 [\d.]+ ms, p99 [\d.]+ ms, max [\d.]+ ms$/);
  });

  it('frames: 3 cameras at 100 fps on a 10 ms device; latest frame wins, every frame accounted for', { timeout: 120_000 }, async () => {
    const configFile = await fleet(setup.transport());
    expect(await main(['frames', '--config', configFile, '--model', 'frames-model', '--streams', '3', '--fps', '100', '--seconds', '2', '--deadline-ms', '1000'])).toBe(0);
    const s = summary();
    expect(s.sent, s.line).toBe(600);
    expect([...s.counts.values()].reduce((a, b) => a + b, 0), s.line).toBe(600);
    // A batch takes 10 ms and a camera sends a frame every 10 ms: with 3 cameras batched together
    // some frames are displaced while their predecessor waits, and many are still served.
    expect(s.counts.get('superseded') ?? 0, s.line).toBeGreaterThan(0);
    expect(s.counts.get('ok') ?? 0, s.line).toBeGreaterThan(100);
  });
});

describe('load with no worker serving the model', () => {
  it('exits 1 and says so when no request was answered', { timeout: 60_000 }, async () => {
    const dir = tempDir('npu-fleet-loadcmd-none-');
    const configFile = join(dir, 'fleet.yaml');
    const transport = { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('loadnone') } };
    writeFileSync(configFile, stringify({ transport, modelRepository: 'examples/models', models: ['mlp-classifier'], log: { level: 'warn' } }));
    const code = await main(['load', '--config', configFile, '--model', 'mlp-classifier', '--rate', '20', '--seconds', '1', '--timeout-ms', '300', '--drain-ms', '500']);
    const s = summary();
    expect(s.sent, s.line).toBe(20);
    expect(s.counts.get('no reply'), s.line).toBe(20);
    expect(code).toBe(1);
    expect(stderr.join('')).toMatch(/no request was answered: is a worker serving mlp-classifier on this bullmq transport/);
  });
});
