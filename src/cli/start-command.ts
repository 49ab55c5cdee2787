import { fileURLToPath } from 'node:url';
import { flagOverridesAsEnv } from '../contracts/config-loader.ts';
import type { FleetConfig } from '../contracts/fleet-config.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { childLogger, createLogger, stderrLogSink } from '../observability/logger.ts';
import { startEmbeddedFleet } from '../runtime/embedded-fleet.ts';
import { Supervisor } from '../runtime/supervisor.ts';
import { EXIT_START_TIMEOUT } from '../runtime/worker-process.ts';
import { EXIT } from './exit-codes.ts';
import { workerNodeFlags } from '../runtime/worker-node-flags.ts';
import { takeEarlySignal } from './early-signals.ts';
import { printLine, onStdoutClosed } from './stdout-lines.ts';
import { offStopSignals, onStopSignals } from './stop-signals.ts';
import { checkDeviceCount, checkModelRepository, workerDeps } from './worker-deps.ts';

const BIN = fileURLToPath(new URL('../../bin/npu-fleet.js', import.meta.url));

function untilSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const on = (s: NodeJS.Signals): void => {
      offStopSignals(on);
      resolve(s);
    };
    onStopSignals(on);
  });
}

/**
 * The first stop signal, from the first line of the command on (with one the launcher caught
 * before): as PID 1 a signal without a handler is ignored, so one during start-up was lost.
 */
function stopLatch(): { readonly signal: Promise<NodeJS.Signals>; received: () => NodeJS.Signals | undefined } {
  let received: NodeJS.Signals | undefined;
  let resolve: (s: NodeJS.Signals) => void = () => undefined;
  const signal = new Promise<NodeJS.Signals>((r) => (resolve = r));
  const on = (s: NodeJS.Signals): void => {
    offStopSignals(on);
    received = s;
    resolve(s);
  };
  onStopSignals(on);
  // stdout's reader gone (`npm start | head -1`): the usual Unix end of a command whose output
  // pipe closed is SIGPIPE's, but dying at once would lose the batches in flight, and going on
  // would run a fleet nobody watches (only the memory broker's own demo load feeds it). It is a
  // stop like SIGTERM's: drain, exit 0. Only the embedded fleet prints to stdout, so only it
  // notices; the supervised fleet's logs have their own EPIPE-safe sink and it runs on.
  const offStdout = onStdoutClosed((code) => {
    offStdout();
    if (received !== undefined) return;
    printLine(`npu-fleet: stdout closed (${code}): draining the embedded fleet as on SIGTERM`, process.stderr);
    on('SIGPIPE');
  });
  const early = takeEarlySignal();
  if (early !== undefined) on(early);
  return { signal, received: () => received };
}

/** `npu-fleet start`: embedded (memory broker, in-process workers) or one process per device. */
export async function startCommand(config: FleetConfig, configFile: string | undefined): Promise<number> {
  const stop = stopLatch();
  if (config.demo.enabled && config.transport.kind !== 'memory') {
    // The demo producer publishes to the in-process memory broker: on a real broker it would have
    // nothing to feed, and starting the fleet without the load the user asked for hides that.
    throw new FleetError(
      'INVALID_ARGUMENT',
      `--demo (demo.enabled) generates load only on the embedded memory fleet, but transport.kind is ${config.transport.kind}` +
        `${configFile ? ` in ${configFile}` : ''}: drop --demo / demo.enabled, and send load to this fleet with \`npu-fleet load --model NAME${configFile ? ` --config ${configFile}` : ''}\``,
      { details: { field: 'demo.enabled', transport: config.transport.kind } },
    );
  }
  // Workers in this process bind their own component: they get the root logger, not this one
  // (a child of a child repeats the key: {"component":"supervisor","component":"worker"}).
  checkDeviceCount(config);
  await checkModelRepository(config);
  // Logs on stderr, as every other command's: stdout carries only the status lines (the embedded
  // fleet's one a second), and a supervised fleet's workers log to the same stderr (Supervisor).
  const root = createLogger({ level: config.log.level, destination: stderrLogSink() });
  const log = childLogger(root, { component: 'supervisor' });
  const stoppedEarly = stop.received();
  if (stoppedEarly !== undefined) {
    log.info({ signal: stoppedEarly }, 'stopped before any worker started');
    return 0;
  }
  if (config.transport.kind === 'memory') {
    const { artifact, openDevice } = workerDeps(config);
    // Nothing restarts a worker of this process: a start-up that hangs ends the process for whoever runs it.
    const starting = startEmbeddedFleet(config, { artifact, openDevice }, root, printLine, () => process.exit(EXIT_START_TIMEOUT));
    const first = await Promise.race([starting.then((fleet) => ({ fleet })), stop.signal.then((signal) => ({ signal }))]);
    if ('signal' in first) {
      // The memory broker dies with the process: nothing acked, nothing to hand back.
      starting.catch(() => undefined);
      log.info({ signal: first.signal }, 'stopped during start-up; nothing to drain');
      return 0;
    }
    const signal = await stop.signal;
    log.info({ signal }, 'draining embedded fleet');
    // Without a handler a second signal took its default action: the process died of it with no
    // word (the supervised fleet says why and exits 1, see Supervisor).
    const force = (again: NodeJS.Signals): void => {
      log.warn({ signal: again }, 'second stop signal: exiting without finishing the drain; requests still queued in the memory broker end with the process');
      process.exit(1);
    };
    onStopSignals(force);
    try {
      const code = await first.fleet.stop();
      log[code === 0 ? 'info' : 'warn']({ reason: signal, code }, `embedded fleet exiting with code ${code} (${signal})`);
      return code;
    } finally {
      offStopSignals(force);
    }
  }
  const supervisor = new Supervisor({
    deviceIds: Array.from({ length: config.devices.count }, (_, i) => i),
    workerArgs: (deviceId) => [...workerNodeFlags(config.worker), BIN, 'worker', '--device', String(deviceId), ...(configFile ? ['--config', configFile] : [])],
    // A worker reads the file and the environment again, not our flags: the ones we were given ride
    // in its env, so it runs the config we checked (--devices 1 over a bad NPU_FLEET__DEVICES__COUNT
    // made every worker exit 2, restarted for good).
    env: flagOverridesAsEnv(config),
    restartBackoffMinMs: config.supervisor.restartBackoffMinMs,
    restartBackoffMaxMs: config.supervisor.restartBackoffMaxMs,
    drainTimeoutMs: config.worker.drainTimeoutMs,
    log,
  });
  supervisor.start();
  const first = await Promise.race([stop.signal.then((signal) => ({ signal })), supervisor.gaveUp.then((gaveUp) => ({ gaveUp }))]);
  if ('gaveUp' in first) {
    // Every device's worker keeps exiting 2, refused its config or command line (the supervisor named
    // the error): the fleet cannot run as configured, and restarting them for ever serves nothing.
    // What still runs drains; a stop signal meanwhile forces it, as a second one does below.
    const { deviceId, error } = first.gaveUp;
    void stop.signal.then((signal) => {
      log.warn({ signal }, 'signal while stopping: killing the workers without waiting for their drain');
      supervisor.kill();
    });
    const code = await supervisor.stop(`every device's worker refused its config or command line`, EXIT.usage);
    printLine(`npu-fleet: the workers of every device exit ${EXIT.usage} at start-up, every time (device ${deviceId} last): fleet stopped: ${error}`, process.stderr);
    return code;
  }
  const { signal } = first;
  log.info({ signal }, 'draining all workers');
  // A second signal forces the stop. Left to its default action it would end this process alone,
  // its workers draining on as orphans that a restarted supervisor would start beside.
  void untilSignal().then((again) => {
    log.warn({ signal: again }, 'second signal: killing the workers without waiting for their drain');
    supervisor.kill();
  });
  return await supervisor.stop(signal);
}
