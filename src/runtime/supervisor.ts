import { spawn, type ChildProcess } from 'node:child_process';
import type { Logger } from '../observability/logger.ts';
import { EXIT_DRAIN_TIMEOUT, EXIT_FATAL, EXIT_HANG, EXIT_OK, EXIT_START_TIMEOUT, stopPastDrainMs } from './worker-process.ts';
import { timerDelayMs } from './timer-delay.ts';

export interface SupervisorOptions {
  readonly deviceIds: readonly number[];
  /** argv of one worker process (without node itself), given its device and restart count. */
  readonly workerArgs: (deviceId: number, restarts: number) => string[];
  readonly env?: NodeJS.ProcessEnv;
  readonly restartBackoffMinMs: number;
  readonly restartBackoffMaxMs: number;
  /** The workers' worker.drainTimeoutMs: SIGKILL comes KILL_SLACK_MS after their own bounds past it (stopPastDrainMs). */
  readonly drainTimeoutMs: number;
  readonly log: Logger;
  /** A worker that ran this long is healthy again: its backoff resets. */
  readonly stableAfterMs?: number;
  /**
   * Every this many exits in a row of a device's worker (none ran stableAfterMs), an error line says
   * it keeps failing (default 5): a worker that can never start (its metricsPort held by another
   * service, a broken device) was one warning among routine restarts, the fleet process up.
   */
  readonly failingAfterExits?: number;
  readonly onWorkerExit?: (deviceId: number, code: number | null, signal: NodeJS.Signals | null) => void;
  /**
   * After this many exits in a row with code 2 (a bad config or command line) of every device's
   * worker, none is restarted again and gaveUp resolves (default 3). Code 2 comes only from a
   * start-up that was refused, never from a worker that was ready, and a restart reads the same
   * config: with no device serving, the loop would only ever repeat it. More than one, so that a
   * config file read while an editor was writing it (a hot edit, saved in place) gets another read
   * once written. While another device's worker still serves, one that keeps exiting 2 is restarted
   * on with backoff, loudly: what it refused can be passing (a model's config.yaml mid-edit, a
   * repository briefly empty), and stopping the fleet would take the serving devices down with it.
   */
  readonly usageExitsToGiveUp?: number;
}

/** Every device's worker kept exiting 2 (bad config or command line): the fleet cannot run as configured. This one was the last. */
export interface GaveUp {
  readonly deviceId: number;
  readonly exits: number;
  /** The worker's own error line (`npu-fleet: …` on its stderr, prefix dropped), or its exit reason if it printed none. */
  readonly error: string;
}

/** A worker's exit code for a bad config or command line (EXIT.usage of the CLI). */
const EXIT_USAGE = 2;

/** How much of a worker's stderr is kept to name its error (the last `npu-fleet: …` line). */
const STDERR_TAIL_CHARS = 8_192;

/** How long past a worker's exit its stderr is read on before its exit is handled. */
const STDERR_END_WAIT_MS = 1_000;

/** The last error line a worker printed (main's `npu-fleet: MESSAGE` before exiting), without the prefix. */
export function lastErrorLine(stderr: string): string | undefined {
  const lines = stderr.split('\n').filter((l) => l.startsWith('npu-fleet: '));
  return lines.at(-1)?.slice('npu-fleet: '.length).trim();
}

/**
 * What a worker's exit means, for the restart line: the number alone sends the operator to the
 * docs, and a worker killed outright (SIGKILL: the OOM killer) or crashed in native code logged
 * nothing of its own.
 */
export function workerExitReason(code: number | null, signal: NodeJS.Signals | null): string {
  if (signal === 'SIGKILL') return 'killed by SIGKILL: out of memory (see the kernel log) or killed by hand';
  if (signal === 'SIGSEGV' || signal === 'SIGBUS' || signal === 'SIGABRT' || signal === 'SIGILL') return `crashed (${signal}): in native code (addon, ACL library) or V8 out of heap; see its stderr`;
  if (signal !== null) return `ended by ${signal}, sent to the worker itself`;
  switch (code) {
    case null:
      return 'could not be started (see the error above)';
    case EXIT_OK:
      return 'stopped on its own signal (drained), not by this supervisor';
    case 1:
      return 'failed to start or crashed (its error is printed above it)';
    case 2:
      return 'invalid config or command line (its error names the field)';
    case EXIT_FATAL:
      return 'the brokers refuse it for good, or its shutdown failed';
    case EXIT_DRAIN_TIMEOUT:
      return 'its drain ran out of worker.drainTimeoutMs';
    case EXIT_HANG:
      return 'device hang, or a device that failed every batch for worker.hangLimitMs';
    case EXIT_START_TIMEOUT:
      return 'its start-up ran past worker.startTimeoutMs (a device open, model load or broker join that never finished; its last line names which)';
    default:
      return `exit code ${code}`;
  }
}

/** Signals a stopping worker may die of before its handlers exist (see stop()). */
const GROUP_STOP_SIGNALS: ReadonlySet<NodeJS.Signals> = new Set(['SIGTERM', 'SIGINT', 'SIGHUP']);

/** Past a worker's own bounds: process exit, log flushing, a loaded host. */
const KILL_SLACK_MS = 1_000;

interface Slot {
  deviceId: number;
  child: ChildProcess | undefined;
  restarts: number;
  consecutiveFailures: number;
  startedAt: number;
  /** When the first run of the current streak of failures started. */
  failingSinceAt: number;
  timer: NodeJS.Timeout | undefined;
  /** Exits with code 2 in a row. */
  usageExits: number;
  /** The end of the current worker's stderr. */
  stderrTail: string;
  /** Resolves once the last worker's exit is handled (its stderr read to the end, onWorkerExit told). */
  exitHandled: Promise<void>;
}

/**
 * `npu-fleet start`: one worker process per device, restarted with exponential backoff when it
 * dies (a hung device makes its worker exit on purpose); SIGTERM drains all of them.
 */
export class Supervisor {
  private readonly slots: Slot[];
  private stopping = false;
  private killed = false;
  private giveUp: (g: GaveUp) => void = () => undefined;
  /**
   * Resolves when every device's worker kept exiting 2 (usageExitsToGiveUp): nothing is restarted
   * any more; the caller stops the fleet (stop()) and exits 2. Never resolves otherwise.
   */
  readonly gaveUp: Promise<GaveUp>;

  constructor(private readonly o: SupervisorOptions) {
    this.slots = o.deviceIds.map((deviceId) => ({ deviceId, child: undefined, restarts: 0, consecutiveFailures: 0, startedAt: 0, failingSinceAt: 0, timer: undefined, usageExits: 0, stderrTail: '', exitHandled: Promise.resolve() }));
    this.gaveUp = new Promise((resolve) => (this.giveUp = resolve));
  }

  start(): void {
    for (const slot of this.slots) this.spawn(slot);
  }

  get restarts(): Record<number, number> {
    return Object.fromEntries(this.slots.map((s) => [s.deviceId, s.restarts]));
  }

  pids(): Record<number, number | undefined> {
    return Object.fromEntries(this.slots.map((s) => [s.deviceId, s.child?.pid]));
  }

  private spawn(slot: Slot): void {
    const args = this.o.workerArgs(slot.deviceId, slot.restarts);
    slot.startedAt = Date.now();
    slot.stderrTail = '';
    let child: ChildProcess;
    try {
      child = spawn(process.execPath, args, {
        // A worker logs to its stdout; under `npu-fleet start` that is the supervisor's stderr,
        // where the supervisor logs too (stdout is for the command's own lines).
        // Its stderr comes through us (passed on as it comes) to name the error of a worker that
        // exits 2; written after we are gone it fails with EPIPE, which the worker ignores (guardStdio).
        stdio: ['ignore', 2, 'pipe'],
        // The restart count rides in the env so npu_fleet_worker_restarts_total survives restarts;
        // our pid, so a worker whose supervisor died before it started still sees it is orphaned.
        env: { ...process.env, ...this.o.env, NPU_FLEET_RESTARTS: String(slot.restarts), NPU_FLEET_SUPERVISED: '1', NPU_FLEET_SUPERVISOR_PID: String(process.pid) },
      });
    } catch (err) {
      // Thrown from a restart timer it would end the supervisor and orphan the other workers.
      this.o.log.error({ device: slot.deviceId, err }, 'cannot start worker');
      this.restartLater(slot, null, null);
      return;
    }
    slot.child = child;
    // A spawn that fails (node binary gone: ENOENT, process limit: EAGAIN) emits only 'error',
    // never 'exit': unhandled it ends the supervisor; it is a failed start, retried with backoff.
    child.on('error', (err) => {
      if (child.pid !== undefined || slot.child !== child) return;
      slot.child = undefined;
      this.o.log.error({ device: slot.deviceId, err }, 'cannot start worker');
      this.restartLater(slot, null, null);
    });
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (chunk: string) => {
      process.stderr.write(chunk);
      slot.stderrTail = (slot.stderrTail + chunk).slice(-STDERR_TAIL_CHARS);
    });
    if (child.pid === undefined) return;
    this.o.log.info({ device: slot.deviceId, workerPid: child.pid, restarts: slot.restarts }, 'worker started');
    child.on('exit', (code, signal) => {
      slot.child = undefined;
      let handled: () => void = () => undefined;
      // Set before stop()'s own exit listener runs (registered later): stop() waits for it.
      slot.exitHandled = new Promise<void>((resolve) => (handled = resolve));
      // Its error line may still be in the pipe: read to the end of its stderr first. Bounded, as
      // 'close' is not: a process the worker started may hold its stderr open past its exit.
      const stderr = child.stderr;
      let done = false;
      const exited = (): void => {
        if (done) return;
        done = true;
        clearTimeout(bound);
        try {
          this.o.onWorkerExit?.(slot.deviceId, code, signal);
          this.restartLater(slot, code, signal);
        } finally {
          handled();
        }
      };
      const bound = setTimeout(exited, STDERR_END_WAIT_MS);
      if (stderr === null || stderr.readableEnded || stderr.destroyed) exited();
      else stderr.once('close', exited);
    });
  }

  private restartLater(slot: Slot, code: number | null, signal: NodeJS.Signals | null): void {
    if (this.stopping) return;
    slot.usageExits = code === EXIT_USAGE ? slot.usageExits + 1 : 0;
    const giveUpAfter = this.o.usageExitsToGiveUp ?? 3;
    if (slot.usageExits >= giveUpAfter) {
      const error = lastErrorLine(slot.stderrTail) ?? workerExitReason(code, signal);
      if (this.slots.every((s) => s.usageExits >= giveUpAfter)) {
        this.o.log.error(
          { device: slot.deviceId, code, exits: slot.usageExits, error },
          `worker exited ${code} (invalid config or command line) ${slot.usageExits} times in a row, each before it was ready, and no device's worker serves: not restarting it, the fleet cannot run as configured: ${error}`,
        );
        this.giveUp({ deviceId: slot.deviceId, exits: slot.usageExits, error });
        return;
      }
      this.o.log.error(
        { device: slot.deviceId, code, exits: slot.usageExits, error },
        // Not "other devices serve": they may be starting, or failing this way too with fewer exits so far.
        `worker exited ${code} (invalid config or command line) ${slot.usageExits} times in a row, each before it was ready; not every device's worker has (the others may serve), so it is restarted on with backoff until what it refuses is fixed: ${error}`,
      );
    }
    const ranMs = Date.now() - slot.startedAt;
    // A start that timed out ran long but was never healthy: its backoff keeps growing.
    const stable = ranMs > (this.o.stableAfterMs ?? 30_000) && code !== EXIT_START_TIMEOUT;
    slot.consecutiveFailures = stable ? 1 : slot.consecutiveFailures + 1;
    if (slot.consecutiveFailures === 1) slot.failingSinceAt = slot.startedAt;
    const backoffMs = Math.min(this.o.restartBackoffMaxMs, this.o.restartBackoffMinMs * 2 ** (slot.consecutiveFailures - 1));
    const reason = workerExitReason(code, signal);
    this.o.log.warn({ device: slot.deviceId, code, signal, reason, ranMs, backoffMs }, 'worker exited; restarting');
    // Restarting on is right (a port a predecessor's draining worker holds frees up, a fixed config is
    // read by the next start, and the other devices keep serving): it has to be loud, not quiet.
    const every = this.o.failingAfterExits ?? 5;
    if (slot.consecutiveFailures % every === 0) {
      const stableS = (this.o.stableAfterMs ?? 30_000) / 1000;
      this.o.log.error(
        { device: slot.deviceId, exits: slot.consecutiveFailures, failingForMs: Date.now() - slot.failingSinceAt, code, signal, reason, backoffMs },
        `worker keeps failing: ${slot.consecutiveFailures} exits in a row without a run of ${stableS} s between them (${reason}); still restarting it, every ${backoffMs} ms`,
      );
    }
    slot.restarts++;
    slot.timer = setTimeout(() => {
      slot.timer = undefined;
      if (!this.stopping) this.spawn(slot);
    }, backoffMs);
  }

  /** How long after SIGTERM a worker still running is SIGKILLed. */
  killAfterMs(): number {
    return this.o.drainTimeoutMs + stopPastDrainMs({ ...process.env, ...this.o.env }) + KILL_SLACK_MS;
  }

  /**
   * Forwards SIGTERM, waits for every worker to drain; SIGKILL once past the workers' own bounds
   * (killAfterMs). `reason` (the signal that stopped the fleet) goes into the supervisor's last line,
   * with the code it exits with. `code`: the code of a stop for an error (gaveUp), returned and
   * named in that line whatever the drain gave.
   */
  async stop(reason = 'stop asked for', code?: number): Promise<number> {
    this.stopping = true;
    let exitCode = EXIT_OK;
    await Promise.all(
      this.slots.map(async (slot) => {
        if (slot.timer) clearTimeout(slot.timer);
        const child = slot.child;
        // Stopped only once every exit is handled: its last stderr read, onWorkerExit told.
        if (!child || child.exitCode !== null) {
          await slot.exitHandled;
          return;
        }
        const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
        child.kill('SIGTERM');
        let killedHere = false;
        const killTimer = setTimeout(() => {
          this.o.log.error({ device: slot.deviceId }, 'worker did not drain in time; killing it');
          killedHere = true;
          child.kill('SIGKILL');
        }, timerDelayMs(this.killAfterMs()));
        const { code, signal } = await exited;
        clearTimeout(killTimer);
        await slot.exitHandled;
        // A worker handles stop signals from the launcher's first line on; dying of one means it was
        // still loading node, with nothing to drain: as clean as a drain. Besides our SIGTERM, Ctrl-C
        // (SIGINT) and a terminal hangup (SIGHUP) reach the whole process group, workers included.
        if (code !== 0 && (signal === null || !GROUP_STOP_SIGNALS.has(signal))) {
          exitCode = 1;
          this.o.log.warn({ device: slot.deviceId, code, signal, reason: killedHere || this.killed ? 'killed by this supervisor' : workerExitReason(code, signal) }, 'worker did not stop cleanly');
        }
      }),
    );
    const clean = exitCode === EXIT_OK;
    exitCode = code ?? exitCode;
    if (clean && code === undefined) this.o.log.info({ reason, code: exitCode }, `supervisor exiting with code ${exitCode} (${reason}): every worker stopped cleanly`);
    else this.o.log.warn({ reason, code: exitCode }, `supervisor exiting with code ${exitCode} (${reason}): ${clean ? 'every worker stopped cleanly' : 'a worker did not stop cleanly (see above)'}`);
    return exitCode;
  }

  /** A forced stop (a second signal): SIGKILL every worker; a pending stop() then resolves with 1. */
  kill(): void {
    this.stopping = true;
    this.killed = true;
    for (const slot of this.slots) {
      if (slot.timer) clearTimeout(slot.timer);
      slot.child?.kill('SIGKILL');
    }
  }
}
