// `npu-fleet frames` and `npu-fleet load` exit 1 when the fleet answered but served nothing in
// time: a drill whose every frame came back expired (a deadline far below the device time) or
// whose every answer was an error must not pass as exit 0. Real Redis (BullMQ), a real worker on
// the simulator. Own file: the simulator reads its time model from the environment when it
// initialises.
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { EXIT } from '../../../src/cli/exit-codes.ts';
import { main } from '../../../src/cli/main.ts';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { runWorker } from '../../../src/runtime/worker-process.ts';
import { captureCliOutput } from '../../helpers/capture-cli-output.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';
// 200 ms a batch: a 20 ms deadline cannot be met.
process.env['NPU_FLEET_SIM_PROFILE'] = 'base=200ms,perItem=0ms';
const log = createLogger({ level: 'warn' });
const { stderr, cleanup } = captureCliOutput();

/** A repository holding mlp-classifier as `name`, its config.yaml changed by `edit`. */
function repository(name: string, edit: (cfg: Record<string, unknown>) => void): string {
  const repo = join(tempDir('npu-fleet-nothingserved-'), 'models');
  cpSync('examples/models/mlp-classifier', join(repo, name), { recursive: true });
  const file = join(repo, name, 'config.yaml');
  const cfg = { ...(parse(readFileSync(file, 'utf8')) as Record<string, unknown>), name };
  edit(cfg);
  writeFileSync(file, stringify(cfg));
  return repo;
}

/**
 * One worker serving `name` from `workerRepo`; returns the CLI's config file, whose repository
 * (what load and frames build their requests from) is `cliRepo`.
 */
async function fleet(name: string, workerRepo: string, cliRepo: string): Promise<string> {
  const transport = { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('nothingserved') } };
  const settings = { transport, devices: { count: 1, backend: 'sim' }, modelRepository: workerRepo, models: [name], worker: { metricsPort: 0 }, log: { level: 'warn' } };
  const worker = await runWorker(parseFleetConfig(settings), 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
  cleanup.push(() => worker.stop());
  const configFile = join(tempDir('npu-fleet-nothingserved-cli-'), 'fleet.yaml');
  writeFileSync(configFile, stringify({ ...settings, modelRepository: cliRepo }));
  return configFile;
}

describe('a run that served nothing in time exits 1', () => {
  it('frames, every frame expired (deadline 20 ms, device 200 ms): exit 1 and stderr says to raise --deadline-ms', { timeout: 60_000 }, async () => {
    const repo = repository('frames-model', (cfg) => (cfg['lateResults'] = 'drop'));
    const configFile = await fleet('frames-model', repo, repo);
    const code = await main(['frames', '--config', configFile, '--model', 'frames-model', '--streams', '2', '--fps', '20', '--seconds', '2', '--deadline-ms', '20']);
    const err = stderr.join('');
    expect(code, err).toBe(EXIT.failed);
    expect(err).toMatch(/no frame was served in time: \d+ expired;.*raise --deadline-ms above the device time/);
    expect(err).not.toMatch(/got no answer/);
  });

  it('frames, every answer an error (the worker refuses the frames as invalid): exit 1 and stderr names the error', { timeout: 60_000 }, async () => {
    const workerRepo = repository('frames-model', () => undefined);
    // The CLI believes the model takes 32 features; the worker's takes 64.
    const cliRepo = repository('frames-model', (cfg) => (cfg['inputs'] = [{ name: 'input', dtype: 'float32', dims: [-1, 32] }]));
    const configFile = await fleet('frames-model', workerRepo, cliRepo);
    const code = await main(['frames', '--config', configFile, '--model', 'frames-model', '--streams', '2', '--fps', '20', '--seconds', '1', '--deadline-ms', '5000']);
    const err = stderr.join('');
    expect(code, err).toBe(EXIT.failed);
    expect(err).toMatch(/no frame was served in time: \d+ invalid \(first: [A-Z_]+: /);
  });

  it('load, every request with a deadline it cannot meet: exit 1 as well', { timeout: 60_000 }, async () => {
    const repo = repository('mlp-classifier', () => undefined);
    const configFile = await fleet('mlp-classifier', repo, repo);
    const code = await main(['load', '--config', configFile, '--model', 'mlp-classifier', '--rate', '20', '--seconds', '1', '--deadline-ms', '20', '--deadline-share', '1']);
    const err = stderr.join('');
    expect(code, err).toBe(EXIT.failed);
    expect(err).toMatch(/no request was served in time: .*raise --deadline-ms above the device time/);
  });
});
