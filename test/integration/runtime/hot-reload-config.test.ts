// Hot reload of an edited config.yaml: a real simulated device, a real memory broker, a repository
// on disk and the worker's own poll. Live fields (a queue delay) reach the running worker; a
// restart-only one (priorityLevels) is warned about, naming it, and not applied.
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadModelConfig, parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { prng, syntheticRequest } from '../../../src/runtime/demo-load.ts';
import { runWorker, type RunningWorker } from '../../../src/runtime/worker-process.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { until } from '../../helpers/until.ts';

const MODEL = 'mlp-classifier';
const APPLIED = 'config.yaml changed; applied to the running worker';
const HELD = 'config.yaml changed in fields a running worker cannot apply; they apply to workers started from now on (restart the workers to apply them)';
const UNFIT = /^config\.yaml no longer fits the model file this worker loaded \(version 1\): a restarted worker would refuse it/;

let worker: RunningWorker | undefined;
let producer: MemoryProducer | undefined;
afterEach(async () => {
  await worker?.stop();
  await producer?.close();
  worker = undefined;
  producer = undefined;
});

/** A worker on a copy of the example model whose config.yaml says `maxQueueDelayMs: <delays>`. */
async function workerWithDelays(delays: string) {
  process.env.NPU_FLEET_DEVICE = 'sim';
  const repo = join(tempDir('npu-fleet-config-reload-'), 'models');
  cpSync(join('examples/models', MODEL), join(repo, MODEL), { recursive: true });
  const configPath = join(repo, MODEL, 'config.yaml');
  const original = readFileSync(configPath, 'utf8');
  expect(original).toContain('maxQueueDelayMs: [0, 2, 20]\n');
  const edit = (yaml: string): void => writeFileSync(configPath, yaml);
  edit(original.replace('maxQueueDelayMs: [0, 2, 20]', `maxQueueDelayMs: ${delays}`));
  const lines: Array<Record<string, unknown>> = [];
  const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
  const config = parseFleetConfig({ modelRepository: repo, devices: { count: 1, backend: 'sim' }, models: [MODEL], worker: { metricsPort: 0 } });
  const broker = new MemoryBroker();
  worker = await runWorker(config, 0, { artifact: 'onnx', openDevice, createTransport: () => new MemoryTransport({ broker }) }, { log, metricsPort: 0 });
  producer = new MemoryProducer({ broker });
  const results = new Map<string, ResultEnvelope>();
  await producer.subscribeReplies('config-reload.replies', (r) => results.set(r.id, r));
  const modelConfig = loadModelConfig(configPath);
  const rand = prng(5);
  let n = 0;
  const send = async (priority: number): Promise<string> => {
    const r = { ...syntheticRequest(modelConfig, n++, rand, { idPrefix: 'config-reload', replyTo: 'config-reload.replies', deadlineShare: 0, maxSamples: 1 }), priority };
    await producer?.publish(r);
    return r.id;
  };
  return { original, edit, lines, results, send };
}

describe('hot reload of an edited config.yaml', () => {
  it('a running worker takes on a lowered maxQueueDelayMs at the next poll, without a restart', async () => {
    const { original, edit, lines, results, send } = await workerWithDelays('[0, 2, 60000]');
    const waiting = await send(2);
    // A minute's delay for priority 2: over a few polls nothing comes back.
    await new Promise((r) => setTimeout(r, 2_500));
    expect(results.has(waiting)).toBe(false);

    const editedAt = Date.now();
    edit(original.replace('maxQueueDelayMs: [0, 2, 20]', 'maxQueueDelayMs: [0, 2, 50]'));
    await until(() => results.has(waiting), 10_000, 'the waiting request to be served on the new delay');
    expect(results.get(waiting)).toMatchObject({ status: 'ok', version: '1' });
    // One poll (1 s) plus the batch: the old delay had 57 s to go.
    expect(Date.now() - editedAt).toBeLessThan(5_000);
    expect(lines.filter((l) => l.msg === APPLIED)).toEqual([expect.objectContaining({ level: 30, model: MODEL, fields: ['maxQueueDelayMs'] })]);
    expect(lines.some((l) => l.msg === HELD)).toBe(false);
    // Nothing was reloaded or restarted for it.
    expect(lines.filter((l) => ['model version loaded', 'version unloaded', 'model repository changed'].includes(String(l.msg)))).toHaveLength(1);

    // A later request of that level waits the new 50 ms, not a minute.
    const next = await send(2);
    await until(() => results.has(next), 5_000, 'a request sent after the change');
    expect(results.get(next)).toMatchObject({ status: 'ok' });
  }, 60_000);

  it('a priorityLevels change is warned about, naming the fields, and not applied', async () => {
    const { original, edit, lines, results, send } = await workerWithDelays('[0, 2, 20]');
    const before = await send(2);
    await until(() => results.has(before), 10_000, 'a request before the change');

    edit(original.replace('priorityLevels: 3', 'priorityLevels: 4').replace('maxQueueDelayMs: [0, 2, 20]', 'maxQueueDelayMs: [0, 2, 20, 40]'));
    await until(() => lines.some((l) => l.msg === HELD), 10_000, 'the warning about the restart-only change');
    expect(lines.filter((l) => l.msg === HELD)).toEqual([expect.objectContaining({ level: 40, model: MODEL, fields: ['priorityLevels', 'maxQueueDelayMs'] })]);
    expect(lines.some((l) => l.msg === APPLIED)).toBe(false);

    // The worker still runs three levels: level 3 is refused, level 2 is served as before.
    const refused = await send(3);
    const served = await send(2);
    await until(() => results.has(refused) && results.has(served), 10_000, 'answers after the change');
    expect(results.get(refused)).toMatchObject({ status: 'invalid' });
    expect(results.get(refused)?.error?.message).toMatch(/has 3 levels/);
    expect(results.get(served)).toMatchObject({ status: 'ok' });
    // Told once, not at every poll.
    await new Promise((r) => setTimeout(r, 2_500));
    expect(lines.filter((l) => l.msg === HELD)).toHaveLength(1);
  }, 60_000);

  it('a restart-only change that no longer fits the loaded model file is called out at error level before any restart: this worker serves on', async () => {
    const { original, edit, lines, results, send } = await workerWithDelays('[0, 2, 20]');
    edit(original.replace('{ name: input, dtype: float32, dims: [-1, 64] }', '{ name: input, dtype: float32, dims: [-1, 65] }'));
    await until(() => lines.some((l) => l.msg === HELD), 10_000, 'the warning about the restart-only change');
    // Before, only the warning: the restart it asked for then failed every load, a crash loop.
    const unfit = lines.filter((l) => UNFIT.test(String(l.msg)));
    expect(unfit, JSON.stringify(lines.filter((l) => Number(l.level) >= 40))).toHaveLength(1);
    expect(unfit[0]).toMatchObject({ level: 50, model: MODEL, versions: ['1'] });
    expect(String(unfit[0]?.msg)).toMatch(/config\.yaml dims \[-1, 65\] do not fit the model's \[-1, 64\]/);
    expect(String(unfit[0]?.msg)).toMatch(/fix config\.yaml before the workers restart \(npu-fleet models validate --load\)/);

    // The running worker keeps its loaded config: a 64-feature request is still served.
    const served = await send(1);
    await until(() => results.has(served), 10_000, 'a request after the change');
    expect(results.get(served)).toMatchObject({ status: 'ok' });
    await new Promise((r) => setTimeout(r, 2_500));
    expect(lines.filter((l) => UNFIT.test(String(l.msg))), 'told once, not at every poll').toHaveLength(1);
  }, 60_000);
});
