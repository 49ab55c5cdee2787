import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { transportFor } from '../../src/cli/worker-deps.ts';
import { parseFleetConfig } from '../../src/contracts/config-loader.ts';
import { openDevice } from '../../src/device/index.ts';
import { createLogger } from '../../src/observability/logger.ts';
import { runWorker } from '../../src/runtime/worker-process.ts';
import { getServices, uniqueName } from './services.ts';
import { tempDir } from './temp-dir.ts';

/**
 * A real worker (device 0, the simulator) serving the example mlp-classifier from a fresh copy of
 * it, on the test Redis (BullMQ) under a queue prefix of this test's own, and the fleet config
 * file a CLI run (`--config`) needs to reach it. The caller stops the worker; set
 * NPU_FLEET_DEVICE=sim (and any simulator profile) before, as the simulator reads them at start.
 */
export async function startBullmqSimWorker(prefix: string) {
  const dir = tempDir(`npu-fleet-${prefix}-`);
  const repo = join(dir, 'models');
  cpSync('examples/models/mlp-classifier', join(repo, 'mlp-classifier'), { recursive: true });
  const settings = {
    transport: { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName(prefix) } },
    devices: { count: 1, backend: 'sim' },
    modelRepository: repo,
    models: ['mlp-classifier'],
    worker: { metricsPort: 0 },
    log: { level: 'warn' },
  };
  const configFile = join(dir, 'fleet.yaml');
  writeFileSync(configFile, stringify(settings));
  const log = createLogger({ level: 'warn' });
  const worker = await runWorker(parseFleetConfig(settings), 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
  return { configFile, worker, settings };
}
