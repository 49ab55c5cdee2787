import type { FleetConfig } from '../contracts/fleet-config.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { childLogger, createLogger } from '../observability/logger.ts';
import { missingWorkerFlags } from '../runtime/worker-node-flags.ts';
import { EXIT_HANG, EXIT_START_TIMEOUT, runWorker } from '../runtime/worker-process.ts';
import { takeEarlySignal } from './early-signals.ts';
import { offStopSignals, onStopSignals } from './stop-signals.ts';
import { checkModelRepositoryDirectory, workerDeps } from './worker-deps.ts';

/**
 * `npu-fleet worker --device N`: runs until SIGTERM/SIGINT/SIGHUP (drain, exit 0; 71 if the drain timed
 * out) or a device hang (exit 75 without waiting for the hung batch; the supervisor restarts us and
 * the broker redelivers what we never acked).
 */
export async function workerCommand(config: FleetConfig, deviceId: number): Promise<number> {
  // The memory broker lives and dies in this process: no producer can reach it, so a worker on it
  // would report ready and serve nothing for good. It is the default, so this is what a forgotten
  // --config looks like. Checked before anything is logged or opened; no stop signal can have come
  // since main's check (nothing awaited in between).
  if (config.transport.kind === 'memory') {
    throw new FleetError(
      'INVALID_CONFIG',
      'transport.kind is memory (the default when the config sets no transport), whose broker lives inside this one process: ' +
        'no producer can reach it, so this worker would serve nothing. Give the fleet config with --config FILE or $NPU_FLEET_CONFIG, ' +
        'and in it set transport.kind to kafka or bullmq with its settings (or NPU_FLEET__TRANSPORT__KIND); ' +
        'the memory broker is for `npu-fleet start`, which runs its workers in its own process',
      { details: { field: 'transport.kind' } },
    );
  }
  // A repository that is not there fails here, naming where modelRepository came from (an
  // NPU_FLEET__MODEL_REPOSITORY the file does not show); the scan in runWorker knows only the path.
  await checkModelRepositoryDirectory(config);
  // runWorker binds component and device itself: it gets the root, this file's own lines the child
  // (binding them on the root too would print each key twice per line).
  const root = createLogger({ level: config.log.level });
  const log = childLogger(root, { component: 'worker', device: deviceId });
  const restarts = Number(process.env.NPU_FLEET_RESTARTS ?? 0) || 0;
  const missing = missingWorkerFlags(config.worker);
  if (missing.length > 0) {
    // Started on its own (a container per NPU), not by `npu-fleet start`, which passes them.
    log.warn({ missing, fix: `NODE_OPTIONS=${missing.join(' ')}` }, `worker runs without ${missing.join(' ')} (worker.maxSemiSpaceMb): start it as \`node ${missing.join(' ')} bin/npu-fleet.js worker ...\` or set NODE_OPTIONS=${missing.join(' ')}; more old-space collections and tail latency without it`);
  }
  // Fault drills: inject simulator faults into a worker's first incarnation only, so the restarted
  // worker shows recovery instead of hitting the same injected fault again.
  if (restarts > 0 && process.env.NPU_FLEET_SIM_FAULTS_FIRST_RUN_ONLY === '1') delete process.env.NPU_FLEET_SIM_FAULTS;
  // A stop asked for during start-up (loading models, waiting for the broker) has nothing to
  // drain: nothing was acked, and anything fetched meanwhile is redelivered. Exit 0 at once, as a
  // drained worker would, instead of dying of the signal's default action.
  const duringStartUp = (signal: NodeJS.Signals): void => {
    log.info({ signal }, 'stopped during start-up; nothing to drain');
    process.exit(0);
  };
  onStopSignals(duringStartUp);
  // One that came while the config loaded (the launcher kept it): acted on now.
  const early = takeEarlySignal();
  if (early !== undefined) duringStartUp(early);
  // Set once the worker is ready: starts its drain (at most once).
  const ready: { drain?: (why: NodeJS.Signals | 'supervisor gone') => void } = {};
  const supervised = process.env.NPU_FLEET_SUPERVISED === '1';
  if (supervised) {
    // Under `npu-fleet start`: if the supervisor dies (even by SIGKILL), drain and exit instead of
    // living on as an orphan that nobody will stop. Watched from the start: a supervisor gone while
    // we load models or wait for the broker would otherwise be missed (ppid read after start-up is
    // already the reaper's), and its SIGTERM during start-up exits at once (nothing to drain).
    const parent = Number(process.env.NPU_FLEET_SUPERVISOR_PID) || process.ppid;
    const watch = setInterval(() => {
      if (process.ppid !== parent) {
        clearInterval(watch);
        log.warn({ parent }, 'supervisor is gone; draining and exiting');
        // The drain itself, not a SIGTERM to ourselves: it starts at most once, whatever comes first.
        if (ready.drain !== undefined) ready.drain('supervisor gone');
        else duringStartUp('SIGTERM');
      }
    }, 1000);
    watch.unref();
  }
  // Filled in once runWorker returns; a hang before that has nothing to abandon yet.
  const late: { abandon?: () => Promise<void>; stop?: () => Promise<number> } = {};
  let finish: (code: number) => void = () => undefined;
  const finished = new Promise<number>((resolve) => (finish = resolve));
  const running = await runWorker(config, deviceId, workerDeps(config), {
    log: root,
    restarts,
    onHang: () => {
      log.fatal('exiting for restart after device hang');
      // The exit code tells a hang from an OOM kill or a crash. process.exit cannot hang on the
      // device: the addon's teardown waits for it only NPU_FLEET_EXIT_GRACE_MS, then _exits with
      // this code (a SIGKILL of ourselves hid it). The supervisor restarts us either way.
      void (late.abandon?.() ?? Promise.resolve()).finally(() => process.exit(EXIT_HANG));
    },
    // The hung open or load cannot be cancelled: process exit leaves it (the addon's exit grace
    // bounds the wait for the device), and a new process tries again.
    onStartTimeout: () => process.exit(EXIT_START_TIMEOUT),
    onTransportFailure: () => {
      // Drain what is held (its results still publish), then exit non-zero: the supervisor
      // restarts us with backoff, and a config error keeps failing visibly instead of idling.
      // (Before runWorker returns there is nothing to stop yet: the check below it takes over.)
      if (late.stop !== undefined) void late.stop().then(finish);
    },
  });
  offStopSignals(duringStartUp);
  late.abandon = () => running.abandon();
  late.stop = () => running.stop();
  log.info({ metricsPort: running.metricsPort }, 'worker ready');
  // A device failing every batch for worker.hangLimitMs (/healthz 503) is out of service as after a
  // hang: only a new process resets it, and meanwhile every request taken is answered failed. Leave
  // as a hang does (what is held goes back to the broker, not through the device) and exit for a
  // restart: under `npu-fleet start` nothing probes /healthz, and in a pod this is quicker than liveness.
  const deviceWatch = setInterval(() => {
    const health = running.worker.health();
    if (health.healthy || running.worker.status !== 'running') return;
    clearInterval(deviceWatch);
    log.fatal({ reason: health.reason }, 'exiting for restart: the device fails every batch');
    void running.abandon().finally(() => process.exit(EXIT_HANG));
  }, 1000);
  deviceWatch.unref();
  let draining = false;
  const onSignal = (signal: NodeJS.Signals | 'supervisor gone'): void => {
    if (draining) {
      // Under `npu-fleet start` a second signal is the same stop: Ctrl-C and systemd signal every
      // process of the group, then the supervisor forwards its own SIGTERM. Its SIGKILL bounds us.
      log.info({ signal }, 'already draining');
      return;
    }
    // On its own, a second Ctrl-C forces the exit (the signal's default action).
    if (!supervised) {
      offStopSignals(onSignal);
    }
    draining = true;
    log.info({ signal }, 'draining');
    void running.stop().then(finish);
  };
  ready.drain = onSignal;
  onStopSignals(onSignal);
  if (running.worker.status === 'failed') void running.stop().then(finish);
  return await finished;
}
