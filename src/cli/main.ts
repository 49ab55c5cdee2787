import { parseArgs } from 'node:util';
import { FleetError } from '../errors/fleet-error.ts';
import { loadFleetConfig } from '../contracts/config-loader.ts';
import { createLogger } from '../observability/logger.ts';
import { startCommand } from './start-command.ts';
import { workerCommand } from './worker-command.ts';
import { validateModelsCommand } from './models-command.ts';
import { publishCommand } from './publish-command.ts';

export const USAGE = `npu-fleet — queue-driven inference workers for Ascend NPUs

Usage:
  npu-fleet start [--config FILE] [--devices N] [--demo]
      The fleet: one worker per device (restarted with backoff), SIGTERM drains them all.
      With no config: memory broker, simulated devices, examples/models, built-in demo load.
  npu-fleet worker --device N [--config FILE]
      One device worker (what a Kubernetes pod runs). Serves /metrics /healthz /readyz.
  npu-fleet models validate DIR
      Checks a model repository (config.yaml schema, version directories, artifacts).
  npu-fleet publish --model NAME [--count N] [--priority P] [--deadline-ms MS] [--await]
                    [--file REQUEST.json] [--timeout-ms MS] [--config FILE]
      Publishes requests (synthetic ones fitting the model, or a JSON request file) and
      optionally waits for each reply.

Config: one YAML file (--config or $NPU_FLEET_CONFIG) plus NPU_FLEET__SECTION__KEY env overrides.`;

export async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'start': {
        const { values } = parseArgs({ args: rest, options: { config: { type: 'string' }, devices: { type: 'string' }, demo: { type: 'boolean' } } });
        const overrides: Record<string, unknown> = {};
        if (values.devices) overrides.devices = { count: Number(values.devices) };
        const config = loadFleetConfig({ file: values.config, overrides });
        const embeddedDefault = config.transport.kind === 'memory' && !values.config && !process.env.NPU_FLEET_CONFIG;
        if (values.demo || embeddedDefault) config.demo.enabled = true;
        return await startCommand(config, values.config);
      }
      case 'worker': {
        const { values } = parseArgs({ args: rest, options: { config: { type: 'string' }, device: { type: 'string' } } });
        const deviceId = Number(values.device);
        if (values.device === undefined || !Number.isInteger(deviceId) || deviceId < 0) {
          throw new FleetError('INVALID_ARGUMENT', '--device N is required (N = device index, 0-based)');
        }
        return await workerCommand(loadFleetConfig({ file: values.config }), deviceId);
      }
      case 'models': {
        const [sub, dir] = rest;
        if (sub !== 'validate' || !dir) throw new FleetError('INVALID_ARGUMENT', 'usage: npu-fleet models validate DIR');
        return validateModelsCommand(dir);
      }
      case 'publish':
        return await publishCommand(rest);
      case undefined:
      case 'help':
      case '--help':
      case '-h':
        process.stdout.write(`${USAGE}\n`);
        return command === undefined ? 2 : 0;
      default:
        throw new FleetError('INVALID_ARGUMENT', `unknown command "${command}"; run npu-fleet --help`);
    }
  } catch (err) {
    const log = createLogger({ level: 'error' });
    if (err instanceof FleetError) {
      process.stderr.write(`npu-fleet: ${err.message}\n`);
      log.debug({ err }, 'command failed');
      return err.code === 'INVALID_ARGUMENT' || err.code === 'INVALID_CONFIG' ? 2 : 1;
    }
    process.stderr.write(`npu-fleet: ${(err as Error).stack ?? String(err)}\n`);
    return 1;
  }
}
