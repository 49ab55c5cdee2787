import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { FleetConfig } from '../contracts/fleet-config.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { startHealthServer, type HealthServer } from '../observability/http-server.ts';
import { childLogger, createLogger, type Logger } from '../observability/logger.ts';
import { FleetMetrics } from '../observability/metrics.ts';
import type { Transport } from '../transport/transport.ts';
import { DRAIN_GRACE_MS, DeviceWorker } from './device-worker.ts';
import type { DeviceLike } from './load-checked.ts';
import { diffServed, newProblems, scanRepositoryAsync, scanRepositorySettled, type ArtifactKind, type ConfigCache, type RepositorySnapshot } from './model-repository.ts';
import { startRepositoryPoll } from './repository-poll.ts';
import { InflightJournal, inflightJournalPath, type CrashHint } from './inflight-journal.ts';
import { openPredecessorNote, predecessorNotePath } from './predecessor-note.ts';
import { StartWatch } from './start-watch.ts';
import { timerDelayMs } from './timer-delay.ts';

/** Exit codes the supervisor understands. */
export const EXIT_OK = 0;
export const EXIT_HANG = 75;
export const EXIT_FATAL = 70;
/** Stopped, but the drain did not finish within worker.drainTimeoutMs: work was handed back to the broker. */
export const EXIT_DRAIN_TIMEOUT = 71;
/** Start-up ran past worker.startTimeoutMs (a device open or a model load that never returned). */
export const EXIT_START_TIMEOUT = 72;

export interface WorkerDeps {
  openDevice(deviceId: number): Promise<DeviceLike>;
  artifact: ArtifactKind;
  createTransport(config: FleetConfig, log: Logger): Transport;
}

export interface RunningWorker {
  readonly worker: DeviceWorker;
  readonly metrics: FleetMetrics;
  readonly metricsPort: number;
  /** Drain and release everything; resolves with the process exit code to use. */
  stop(): Promise<number>;
  /**
   * After a device hang: commit what was settled and leave the broker session (so the group
   * rebalances at once instead of after a session timeout), bounded in time. The hung batch's
   * deliveries stay unacked and are redelivered.
   */
  abandon(timeoutMs?: number): Promise<void>;
}

export interface RunWorkerOptions {
  log?: Logger;
  metricsPort?: number;
  restarts?: number;
  onHang?: () => void;
  /** The transport can no longer receive work: call stop() and exit with its code. */
  onTransportFailure?: (err: FleetError) => void;
  /**
   * Start-up ran past worker.startTimeoutMs (logged with what it waits for): exit with
   * EXIT_START_TIMEOUT. A hung open or load cannot be cancelled, only left to process exit.
   */
  onStartTimeout?: () => void;
}

const REPO_POLL_MS = 1000;
/** A scan taking longer is warned about (a hung mount); a healthy one takes milliseconds. */
const REPO_SCAN_LIMIT_MS = 5_000;
const SETTLE_MS = 500;
/** How long a start waits for model files that keep changing before it loads them as they are. */
const START_SETTLE_WAIT_MS = 60_000;
/** How long a hung worker waits for its suspects to reach the broker before closing anyway. */
const SUSPECTS_WAIT_MS = 1_500;
/** How long stopping a hung worker waits for its broker session to close. */
const ABANDON_CLOSE_MS = 3_000;
/** The addon's wait at exit for a batch left on the device: NPU_FLEET_EXIT_GRACE_MS, as native/src/device_core.cc reads it. */
const DEFAULT_EXIT_GRACE_MS = 2_000;

/**
 * The longest a stopped worker process runs past worker.drainTimeoutMs: the drain's wait for the
 * broker, the wait for a hang's suspects, the bounded transport close and, with a batch left on
 * the device, the addon's wait for it at exit. A supervisor's SIGKILL must come later than this,
 * or it kills a worker that was stopping within its bounds and loses its exit code.
 */
export function stopPastDrainMs(env: NodeJS.ProcessEnv = process.env): number {
  const exitGraceMs = Number.parseInt(env.NPU_FLEET_EXIT_GRACE_MS ?? '', 10);
  return DRAIN_GRACE_MS + SUSPECTS_WAIT_MS + ABANDON_CLOSE_MS + (exitGraceMs > 0 ? exitGraceMs : DEFAULT_EXIT_GRACE_MS);
}
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms).unref());

/**
 * Everything one device worker needs, wired at the edges: logger, metrics + HTTP, transport,
 * device, repository watcher (hot reload) and the drain path. The process entry point only
 * adds signal handling (workers/worker.ts).
 */
export async function runWorker(
  config: FleetConfig,
  deviceId: number,
  deps: WorkerDeps,
  options: RunWorkerOptions = {},
): Promise<RunningWorker> {
  const rootLog = options.log ?? createLogger({ level: config.log.level });
  const log = childLogger(rootLog, { component: 'worker', device: deviceId });
  const metrics = new FleetMetrics({ defaultLabels: { worker: `device-${deviceId}` } });
  // Carried across restarts by the supervisor (NPU_FLEET_RESTARTS), so the counter only grows.
  metrics.workerRestarted(deviceId, options.restarts ?? 0);
  // Unready is expected until the start-up is over: the not-ready alert leaves it to its own bound.
  metrics.setWorkerStarting(true);
  // Listening before anything else: a port in use fails the start before the broker is joined,
  // and liveness answers through a long device open / model load / broker join (a kubelet that
  // cannot connect for that long would restart the pod, and the next start is just as long).
  let current: DeviceWorker | undefined;
  const watch = new StartWatch(config.worker.startTimeoutMs);
  const port = options.metricsPort ?? (config.worker.metricsPort === 0 ? 0 : config.worker.metricsPort + deviceId);
  const server = await startHealthServer({
    port,
    metrics,
    isReady: () => current?.readiness() ?? { ready: false, reason: 'starting' },
    isHealthy: () => current?.health() ?? watch.health(),
  });
  log.info({ metricsPort: server.port }, 'serving /metrics, /healthz, /readyz');
  const startTimer = setTimeout(() => {
    log.fatal(
      { waitingFor: watch.waitingFor(), elapsedMs: watch.elapsedMs(), startTimeoutMs: watch.timeoutMs },
      `start-up did not finish within worker.startTimeoutMs: still waiting for ${watch.waitingFor()}; exiting for a restart`,
    );
    options.onStartTimeout?.();
  }, timerDelayMs(config.worker.startTimeoutMs));
  try {
    return await startedWorker(config, deviceId, deps, options, { log, rootLog, metrics, server, watch, started: (w) => (current = w) });
  } catch (err) {
    await server.close();
    throw err;
  } finally {
    watch.finish();
    metrics.setWorkerStarting(false);
    clearTimeout(startTimer);
  }
}

async function startedWorker(
  config: FleetConfig,
  deviceId: number,
  deps: WorkerDeps,
  options: RunWorkerOptions,
  edge: { log: Logger; rootLog: Logger; metrics: FleetMetrics; server: HealthServer; watch: StartWatch; started: (worker: DeviceWorker) => void },
): Promise<RunningWorker> {
  const { log, rootLog, metrics, server, watch } = edge;
  watch.enter(`opening device ${deviceId} (devices.backend ${config.devices.backend})`);
  const device = watch.watchDevice(await deps.openDevice(deviceId));
  watch.enter(`reading the model repository ${config.modelRepository}`);
  // Shared by the start-up scan and the polls: it keeps each model's last valid config.yaml.
  const configCache: ConfigCache = new Map();
  let snapshot: RepositorySnapshot = await scanRepositorySettled(
    config.modelRepository,
    { artifact: deps.artifact, only: config.models, configCache },
    { settleMs: SETTLE_MS, maxWaitMs: START_SETTLE_WAIT_MS, onWait: (waitMs, paths) => log.info({ waitMs, paths }, 'model files changed just now (a copy in progress?): waiting for them to settle before loading') },
  );
  for (const p of snapshot.problems) log.warn({ path: p.path }, `model repository: ${p.message}`);
  // A name in `models` the repository lacks (a typo) would leave that model unserved without a
  // word, or, when it was the only one, fail as "no servable model" while models validate passes.
  const absent = (config.models ?? []).filter((name) => !existsSync(join(snapshot.dir, name, 'config.yaml')));
  if (absent.length > 0) {
    const message =
      `models lists ${absent.join(', ')}, which ${config.modelRepository} does not hold (no ${absent.map((n) => `${n}/config.yaml`).join(', ')}): ` +
      'fix the name in models (NPU_FLEET__MODELS), deploy the model, or drop it from the list';
    if (absent.length === config.models?.length) {
      await device.close();
      throw new FleetError('INVALID_CONFIG', message, { details: { field: 'models', absent } });
    }
    log.warn({ absent }, message);
  }
  if ([...snapshot.models.values()].every((m) => m.served.length === 0)) {
    await device.close();
    throw new FleetError('INVALID_CONFIG', `no servable model in ${snapshot.dir}; run \`npu-fleet models validate ${config.modelRepository}\``);
  }
  const transport = deps.createTransport(config, rootLog);
  const journalPath = inflightJournalPath(config, deviceId);
  const journal = journalPath === undefined ? undefined : new InflightJournal(journalPath, (err) => log.warn({ err, path: journalPath }, 'cannot write the in-flight journal (worker.journalDir); a crash on a poison input will not be counted'));
  const predecessor = journalPath === undefined ? undefined : openPredecessorNote(predecessorNotePath(journalPath), log);
  // A second worker started for a device whose worker still runs (scaling up with the same config)
  // finds that live worker's batches in the journal: they are on its device, not left by a crash,
  // so they are neither counted as suspects nor cleared from under it.
  const crashHints =
    (predecessor?.ownerRunning === true
      ? undefined
      : journal?.takeCrashHints((reason) => log.warn({ path: journalPath, reason }, 'ignoring the in-flight journal the previous worker of this device left: if it died of a poison input, that crash is not counted'))) ??
    new Map<string, CrashHint>();
  if (crashHints.size > 0) {
    log.warn({ requests: crashHints.size, journal: journalPath }, "the previous worker of this device died with a batch on the device: those requests count as suspects when they come back");
  }
  let transportFailed = false;
  const worker: DeviceWorker = new DeviceWorker({
    config,
    deviceId,
    device,
    transport,
    metrics,
    log,
    snapshot,
    journal,
    crashHints,
    predecessor,
    onHang: () => {
      metrics.setWorkerReady(false);
      options.onHang?.();
    },
    onTransportFailure: (err) => {
      transportFailed = true;
      metrics.setWorkerReady(false);
      options.onTransportFailure?.(err);
    },
  });
  // Loads in flight name their files; once they are done the broker is what is left.
  watch.enter(`the broker (transport.kind ${config.transport.kind}) to take the worker's subscriptions, its models loaded`);
  try {
    await worker.start();
  } catch (err) {
    // Models stay loaded and the device open otherwise: an embedded fleet's process lives on, and
    // on an NPU its memory stays taken until the process exits.
    await worker.abandonStart().catch((e: unknown) => log.warn({ err: e }, 'releasing the models and the transport of a failed start failed'));
    await device.close().catch((e: unknown) => log.warn({ err: e }, 'closing the device of a failed start failed'));
    throw err;
  }
  edge.started(worker);
  // Not ready if the transport already failed for good while starting.
  metrics.setWorkerReady(worker.ready);
  // A broker away turns the gauge to 0 as it turns /readyz to 503 (transitions set it too).
  metrics.onScrape(() => metrics.setWorkerReady(worker.readiness().ready));
  for (const hook of worker.gaugeHooks()) metrics.onScrape(hook);

  const poll = startRepositoryPoll({
    dir: config.modelRepository,
    intervalMs: REPO_POLL_MS,
    scanLimitMs: REPO_SCAN_LIMIT_MS,
    log,
    active: () => worker.status === 'running',
    scan: () => scanRepositoryAsync(config.modelRepository, { artifact: deps.artifact, settleMs: SETTLE_MS, only: config.models, configCache, previous: snapshot }),
    onSlowScan: () => metrics.repositoryScanSlow(),
    apply: async (next) => {
      for (const p of newProblems(snapshot, next)) log.warn({ path: p.path }, `model repository: ${p.message}`);
      const diff = diffServed(snapshot, next);
      // Only a version loaded from the old bytes: one whose load failed (a half-copied file) and
      // whose copy has now completed was never served, and is loaded below as a retry.
      for (const v of diff.replaced.filter((r) => worker.loadedFromOtherBytes(r))) {
        log.warn({ model: v.model, version: v.version, path: v.artifactPath }, 'model file replaced in place; running workers keep the bytes they loaded (workers started later load the new file): deploy new bytes as a new version directory');
      }
      // The snapshot advances even when a version failed to load (it is not retried each poll);
      // reloadPending() notices when that version's file has changed since.
      const versionsChanged = diff.added.length > 0 || diff.removed.length > 0 || worker.reloadPending(next);
      // A changed config.yaml goes to the running lanes: its live fields apply now, the others
      // are warned about until a restart (ModelLanes, model-config-reload.ts).
      if (versionsChanged || diff.configChanged.length > 0) await worker.applySnapshot(next);
      if (versionsChanged) {
        // Logged after applying: a version the repository no longer selects keeps serving while
        // its replacement failed to load, and calling it removed sent operators the wrong way.
        const key = (v: { model: string; version: string }): string => `${v.model}@${v.version}`;
        const serving = new Set(worker.servedVersions().map(key));
        const unselected = diff.removed.map(key);
        log.info(
          { added: diff.added.map(key), removed: unselected.filter((v) => !serving.has(v)), stillServing: unselected.filter((v) => serving.has(v)) },
          'model repository changed',
        );
      }
      snapshot = next;
    },
  });

  let stopping: Promise<number> | undefined;
  const stop = (): Promise<number> =>
    (stopping ??= (async () => {
      poll.stop();
      metrics.setWorkerReady(false);
      const afterHang = async (): Promise<number> => {
        await Promise.race([worker.hangRecorded, sleep(SUSPECTS_WAIT_MS)]);
        // Unloading a model or closing the device waits for the hung batch, maybe forever: leave
        // both to process exit; only the broker session ends, so what we held is redelivered.
        await Promise.race([transport.close().catch((err: unknown) => log.warn({ err }, 'transport close after hang failed')), sleep(ABANDON_CLOSE_MS)]);
        log.warn('stopped after a device hang; the device is left to process exit');
        return EXIT_HANG;
      };
      let timedOut = false;
      try {
        const hung = (): boolean => worker.status === 'hung';
        if (hung()) return await afterHang();
        const drained = await worker.drain();
        timedOut = drained.timedOut;
        log.info({ released: drained.released, timedOut }, 'drained');
        // The device hung while draining (the drain timed out behind the hung batch).
        if (hung()) return await afterHang();
        if (timedOut && worker.inflightBatches > 0) {
          // Unloading a model or closing the device would wait for the batches still on it, up to
          // the hang limit: past the drain timeout the stop is over. The broker session ends so their
          // requests are redelivered at once; the device is left to process exit (its grace period).
          await Promise.race([transport.close().catch((err: unknown) => log.warn({ err }, 'transport close after the drain timeout failed')), sleep(ABANDON_CLOSE_MS)]);
          log.warn({ inflightBatches: worker.inflightBatches, drainTimeoutMs: config.worker.drainTimeoutMs }, 'drain timed out with batches on the device; their requests go back to the broker, the device is left to process exit');
          return EXIT_DRAIN_TIMEOUT;
        }
        // Past the drain bound the broker session gets the same short bound as after a hang.
        await worker.close(timedOut ? ABANDON_CLOSE_MS : undefined);
        log.info('transport closed');
        await device.close();
        log.info('device closed');
      } catch (err) {
        log.error({ err }, 'error during shutdown');
        return EXIT_FATAL;
      } finally {
        journal?.close();
        await server.close();
      }
      return transportFailed ? EXIT_FATAL : timedOut ? EXIT_DRAIN_TIMEOUT : EXIT_OK;
    })());
  const abandon = async (timeoutMs = ABANDON_CLOSE_MS): Promise<void> => {
    poll.stop();
    // The hung batch's suspects reach the broker first (BullMQ writes them on the connection close()
    // ends), but a broker that does not answer must not keep the close from starting.
    await Promise.race([worker.hangRecorded, sleep(SUSPECTS_WAIT_MS)]);
    await Promise.race([
      transport.close().catch((err: unknown) => log.warn({ err }, 'transport close after hang failed')),
      sleep(timeoutMs),
    ]);
    await server.close();
  };
  return { worker, metrics, metricsPort: server.port, stop, abandon };
}
