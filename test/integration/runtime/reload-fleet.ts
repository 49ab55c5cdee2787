// A worker (real simulated device, memory broker) serving a copy of an example model from a
// repository on disk, for the hot reload tests: they change the copy under the running worker.
import { cpSync } from 'node:fs';
import { join } from 'node:path';
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

export const MODEL = 'mlp-classifier';

/** Worker log lines, parsed. */
export type LogLine = Record<string, unknown>;

/**
 * Starts a worker on `<tmp>/models/mlp-classifier` (copied from examples/models, then changed by
 * `prepare`); `ask()` sends one request and waits for its result, `version` pins one. The caller
 * stops `running`.
 */
export async function fleetOnCopiedRepo(opts: { seed?: number; prepare?: (modelDir: string) => void } = {}) {
  process.env.NPU_FLEET_DEVICE = 'sim';
  const repo = join(tempDir('npu-fleet-reload-'), 'models');
  cpSync(join('examples/models', MODEL), join(repo, MODEL), { recursive: true });
  opts.prepare?.(join(repo, MODEL));
  const lines: LogLine[] = [];
  const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as LogLine) } });
  const config = parseFleetConfig({ modelRepository: repo, devices: { count: 1, backend: 'sim' }, models: [MODEL], worker: { metricsPort: 0 } });
  const broker = new MemoryBroker();
  const running: RunningWorker = await runWorker(config, 0, { artifact: 'onnx', openDevice, createTransport: () => new MemoryTransport({ broker }) }, { log, metricsPort: 0 });
  const producer = new MemoryProducer({ broker });
  const results = new Map<string, ResultEnvelope>();
  await producer.subscribeReplies('reload.replies', (r) => results.set(r.id, r));
  const modelConfig = loadModelConfig(join(repo, MODEL, 'config.yaml'));
  const rand = prng(opts.seed ?? 3);
  let n = 0;
  const ask = async (version?: string): Promise<ResultEnvelope> => {
    const r = syntheticRequest(modelConfig, n++, rand, { idPrefix: 'reload', replyTo: 'reload.replies', deadlineShare: 0, maxSamples: 1 });
    await producer.publish(version === undefined ? r : { ...r, version });
    await until(() => results.has(r.id), 20_000, `result of ${r.id}`);
    return results.get(r.id)!;
  };
  const failures = () => lines.filter((l) => l.msg === 'model version failed to load; keeping the versions already served (tried again when the file changes)');
  return { repo, lines, running, producer, ask, failures };
}
