import { FleetError } from '../errors/fleet-error.ts';
import { loadFleetConfig } from '../contracts/config-loader.ts';
import { MAX_DEVICES } from '../contracts/fleet-config.ts';
import { createLogger, stderrLogSink } from '../observability/logger.ts';
import { startCommand } from './start-command.ts';
import { workerCommand } from './worker-command.ts';
import { loadCheckModelsCommand, loadedBackendArtifact, validateModelsCommand } from './models-command.ts';
import { publishCommand } from './publish-command.ts';
import { dlqCommand } from './dlq-command.ts';
import { framesCommand, loadCommand } from './load-command.ts';
import { COMMAND_USAGE, intOption, noPositionals, parseCommandArgs } from './cli-args.ts';
import { earlySignal, signalExitCode, takeEarlySignal } from './early-signals.ts';
import { guardStdio } from './stdout-lines.ts';
import { EXIT, EXIT_CODES_HELP, exitCodeOf } from './exit-codes.ts';

export const USAGE = `npu-fleet — queue-driven inference workers for Ascend NPUs

Usage:
${Object.values(COMMAND_USAGE)
  .map((u) => `  ${u}`)
  .join('\n')}

Run npu-fleet COMMAND --help for one command.
Config: one YAML file (--config or $NPU_FLEET_CONFIG) plus NPU_FLEET__SECTION__KEY env overrides.

${EXIT_CODES_HELP}`;

export async function main(argv: readonly string[]): Promise<number> {
  // Before any output: a write to a pipe whose reader has gone (`| head -1`) is otherwise an
  // unhandled 'error' event, a stack trace and exit 1 in the middle of the command.
  guardStdio();
  const [command, ...rest] = argv;
  const serving = command === 'start' || command === 'worker';
  // A stop signal while the CLI loaded (caught by bin/npu-fleet.js): nothing has started yet.
  const before = earlySignal();
  if (before !== undefined) {
    takeEarlySignal();
    process.stderr.write(`npu-fleet: ${before} before ${command ?? 'a command'} started; exiting\n`);
    return serving ? 0 : signalExitCode(before);
  }
  // The other commands keep the default actions (or install their own handlers).
  if (!serving) takeEarlySignal();
  try {
    switch (command) {
      case 'start': {
        const parsed = parseCommandArgs('start', rest, { config: { type: 'string' }, devices: { type: 'string' }, demo: { type: 'boolean' } });
        if (parsed === undefined) return 0;
        const { values, positionals } = parsed;
        noPositionals('start', positionals);
        const overrides: Record<string, unknown> = {};
        if (values.devices !== undefined) overrides.devices = { count: intOption('devices', values.devices, 1, MAX_DEVICES) };
        const config = loadFleetConfig({ file: values.config, overrides });
        const embeddedDefault = config.transport.kind === 'memory' && !values.config && !process.env.NPU_FLEET_CONFIG;
        if (values.demo || embeddedDefault) config.demo.enabled = true;
        return await startCommand(config, values.config);
      }
      case 'worker': {
        const parsed = parseCommandArgs('worker', rest, { config: { type: 'string' }, device: { type: 'string' } });
        if (parsed === undefined) return 0;
        const { values, positionals } = parsed;
        noPositionals('worker', positionals);
        if (values.device === undefined) throw new FleetError('INVALID_ARGUMENT', '--device N is required (N = device index, 0-based)');
        return await workerCommand(loadFleetConfig({ file: values.config }), intOption('device', values.device, 0));
      }
      case 'models': {
        const parsed = parseCommandArgs('models', rest, { load: { type: 'boolean' }, device: { type: 'string' } });
        if (parsed === undefined) return 0;
        const [sub, dir, extra] = parsed.positionals;
        if (sub !== 'validate' || !dir || extra !== undefined) throw new FleetError('INVALID_ARGUMENT', `usage: ${COMMAND_USAGE.models.split('\n')[0]}`);
        const device = parsed.values.device === undefined ? 0 : intOption('device', parsed.values.device, 0);
        // With --load the static check reads the artifact the loading backend will, not the env's guess.
        const code = parsed.values.load === true ? validateModelsCommand(dir, undefined, loadedBackendArtifact()) : validateModelsCommand(dir);
        if (parsed.values.load !== true) return code;
        // A static problem in one model must not hide a corrupt or mismatched file in another: the
        // versions that scanned are loaded either way, and either check failing fails the command.
        const loaded = await loadCheckModelsCommand(dir, device);
        return code !== 0 ? code : loaded;
      }
      case 'publish':
        return await publishCommand(rest);
      case 'dlq':
        return await dlqCommand(rest);
      case 'load':
        return await loadCommand(rest);
      case 'frames':
        return await framesCommand(rest);
      case undefined:
      case 'help':
      case '--help':
      case '-h':
        process.stdout.write(`${USAGE}\n`);
        return command === undefined ? EXIT.usage : EXIT.ok;
      default:
        throw new FleetError('INVALID_ARGUMENT', `unknown command "${command}"; run npu-fleet --help`);
    }
  } catch (err) {
    const log = createLogger({ level: 'error', destination: stderrLogSink() });
    if (err instanceof FleetError) {
      process.stderr.write(`npu-fleet: ${err.message}\n`);
      log.debug({ err }, 'command failed');
      return exitCodeOf(err);
    }
    process.stderr.write(`npu-fleet: ${(err as Error).stack ?? String(err)}\n`);
    return EXIT.failed;
  }
}
