import { existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/observability/logger.ts';
import { Supervisor, type SupervisorOptions } from '../../../src/runtime/supervisor.ts';

/** A worker stand-in: runs until SIGTERM, then exits 0 as a drained worker does. */
const DRAINING_WORKER = ['-e', "process.on('SIGTERM', () => process.exit(0)); setInterval(() => undefined, 1000);"];

const realExecPath = process.execPath;
afterEach(() => {
  process.execPath = realExecPath;
});

function supervisor(over: Partial<SupervisorOptions> = {}): { sup: Supervisor; exits: Array<{ device: number; code: number | null }> } {
  const exits: Array<{ device: number; code: number | null }> = [];
  const sup = new Supervisor({
    deviceIds: [0],
    workerArgs: () => DRAINING_WORKER,
    restartBackoffMinMs: 50,
    restartBackoffMaxMs: 200,
    drainTimeoutMs: 2_000,
    log: createLogger({ level: 'silent' }),
    onWorkerExit: (device, code) => exits.push({ device, code }),
    ...over,
  });
  return { sup, exits };
}

async function until(cond: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('Supervisor', () => {
  it('a worker that cannot be spawned (node binary gone: ENOENT) is retried with backoff instead of crashing the supervisor', async () => {
    const { sup } = supervisor();
    process.execPath = '/nonexistent/node';
    sup.start();
    await new Promise((r) => setTimeout(r, 150));
    process.execPath = realExecPath;
    await until(() => sup.pids()[0] !== undefined);
    expect(sup.restarts[0]).toBeGreaterThanOrEqual(1);
    // Past node's start-up, so the stand-in's SIGTERM handler is installed.
    await new Promise((r) => setTimeout(r, 500));
    expect(await sup.stop()).toBe(0);
  });

  it('a crash loop backs off exponentially up to the maximum, back to the minimum after a healthy run, counting every restart', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    let healthy = false;
    const restartsGiven: number[] = [];
    const { sup } = supervisor({
      log,
      restartBackoffMinMs: 50,
      restartBackoffMaxMs: 200,
      stableAfterMs: 800,
      workerArgs: (_device, restarts) => (restartsGiven.push(restarts), ['-e', healthy ? 'setTimeout(() => process.exit(3), 1000)' : 'process.exit(1)']),
    });
    sup.start();
    await until(() => lines.filter((l) => l.msg === 'worker exited; restarting').length >= 5);
    healthy = true;
    await until(() => lines.some((l) => l.msg === 'worker exited; restarting' && l.code === 3));
    await sup.stop();
    const backoffs = lines.filter((l) => l.msg === 'worker exited; restarting').map((l) => `${String(l.code)}:${String(l.backoffMs)}`);
    expect(backoffs.slice(0, 5)).toEqual(['1:50', '1:100', '1:200', '1:200', '1:200']);
    expect(backoffs.at(-1)).toBe('3:50');
    expect(restartsGiven).toEqual(restartsGiven.map((_, i) => i));
    expect(sup.restarts[0]).toBe(backoffs.length);
  });

  it('a worker whose start-up timed out (exit 72) is restarted with growing backoff, though it ran past stableAfterMs, and the reason names worker.startTimeoutMs', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    const { sup } = supervisor({ log, stableAfterMs: 100, restartBackoffMinMs: 50, restartBackoffMaxMs: 400, workerArgs: () => ['-e', 'setTimeout(() => process.exit(72), 300)'] });
    sup.start();
    await until(() => lines.filter((l) => l.msg === 'worker exited; restarting').length >= 4);
    await sup.stop();
    const exited = lines.filter((l) => l.msg === 'worker exited; restarting');
    expect(exited.slice(0, 4).map((l) => `${String(l.code)}:${String(l.backoffMs)}`)).toEqual(['72:50', '72:100', '72:200', '72:400']);
    expect(String(exited[0]?.reason)).toMatch(/worker\.startTimeoutMs/);
  });

  // The supervisor's last line was a worker's; whether it exited, why and with what code, nobody said.
  it('logs its own exit: the reason it stops and the code it exits with', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    const { sup } = supervisor({ log, deviceIds: [0, 1] });
    sup.start();
    await until(() => sup.pids()[0] !== undefined && sup.pids()[1] !== undefined);
    await new Promise((r) => setTimeout(r, 500));
    expect(await sup.stop('SIGTERM')).toBe(0);
    expect(lines.at(-1)).toMatchObject({ level: 30, reason: 'SIGTERM', code: 0, msg: 'supervisor exiting with code 0 (SIGTERM): every worker stopped cleanly' });
  });

  it('a worker still running past the drain timeout and its own bounds after it is SIGKILLed, reported, and the stop resolves 1', async () => {
    const stuck = ['-e', "process.on('SIGTERM', () => undefined); setInterval(() => undefined, 1000);"];
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    // The workers' exit wait for the device counts in their bounds, as they read it.
    const { sup, exits } = supervisor({ workerArgs: () => stuck, drainTimeoutMs: 200, log, env: { NPU_FLEET_EXIT_GRACE_MS: '100' } });
    // Drain grace 1 s + a hang's suspects 1.5 s + transport close 3 s + exit grace, and 1 s of slack.
    expect(sup.killAfterMs()).toBe(200 + 1_000 + 1_500 + 3_000 + 100 + 1_000);
    expect(supervisor({ drainTimeoutMs: 30_000, env: { NPU_FLEET_EXIT_GRACE_MS: '' } }).sup.killAfterMs()).toBe(30_000 + 8_500);
    sup.start();
    await new Promise((r) => setTimeout(r, 500));
    const stoppedAt = Date.now();
    expect(await sup.stop()).toBe(1);
    expect(Date.now() - stoppedAt).toBeGreaterThanOrEqual(sup.killAfterMs());
    expect(exits).toEqual([{ device: 0, code: null }]);
    expect(lines.map((l) => l.msg)).toContain('worker did not drain in time; killing it');
    expect(lines.find((l) => l.msg === 'worker did not stop cleanly')).toMatchObject({ device: 0, signal: 'SIGKILL', reason: 'killed by this supervisor' });
    expect(lines.at(-1)).toMatchObject({ level: 40, code: 1, msg: 'supervisor exiting with code 1 (stop asked for): a worker did not stop cleanly (see above)' });
  });

  it('stop() resolves once each worker exit is handled: its stderr read to the end (a process it started holds it open), onWorkerExit told', async () => {
    // On SIGTERM the worker leaves a process behind on its stderr for 0.5 s, then exits at once.
    // It says when its handler is in (a loaded CI machine took over 500 ms to get there).
    const ready = join(tmpdir(), `npu-fleet-sup-ready-${process.pid}-${Date.now()}`);
    const leavesStderrOpen = [
      '-e',
      `process.on('SIGTERM', () => { require('node:child_process').spawn('sleep', ['0.5'], { stdio: ['ignore', 'ignore', 'inherit'], detached: true }).unref(); process.exit(0); }); require('node:fs').writeFileSync(${JSON.stringify(ready)}, ''); setInterval(() => undefined, 1000);`,
    ];
    const { sup, exits } = supervisor({ workerArgs: () => leavesStderrOpen });
    sup.start();
    await until(() => existsSync(ready), 30_000);
    rmSync(ready, { force: true });
    expect(await sup.stop()).toBe(0);
    // Before, stop() resolved at the exit itself and the exit was reported after it (a CI run's
    // supervisor test saw no exit of a device that had stopped cleanly).
    expect(exits).toEqual([{ device: 0, code: 0 }]);
  });

  it('a drain timeout beyond setTimeout\'s 2^31 - 1 ms waits for the drain instead of SIGKILLing the worker at once', async () => {
    const slowDrain = ['-e', "process.on('SIGTERM', () => setTimeout(() => process.exit(0), 300)); setInterval(() => undefined, 1000);"];
    const { sup, exits } = supervisor({ workerArgs: () => slowDrain, drainTimeoutMs: 40 * 86_400_000 });
    sup.start();
    await new Promise((r) => setTimeout(r, 500));
    expect(await sup.stop()).toBe(0);
    expect(exits).toEqual([{ device: 0, code: 0 }]);
  });

  it('kill() during a stop (a second signal) SIGKILLs a worker still draining: stop() resolves 1 at once, not after the drain timeout', async () => {
    const draining = ['-e', "process.on('SIGTERM', () => undefined); setInterval(() => undefined, 1000);"];
    const { sup, exits } = supervisor({ workerArgs: () => draining, drainTimeoutMs: 30_000 });
    sup.start();
    await new Promise((r) => setTimeout(r, 500));
    const stopping = sup.stop();
    await new Promise((r) => setTimeout(r, 200));
    const killedAt = Date.now();
    sup.kill();
    expect(await stopping).toBe(1);
    expect(Date.now() - killedAt).toBeLessThan(2_000);
    expect(exits).toEqual([{ device: 0, code: null }]);
  });

  it('SIGTERM reaching a worker before it installed its handlers (node still loading) is a clean stop: exit 0, not 1', async () => {
    // The stand-in installs its handler after 1 s, as a real worker does once tsx and the CLI loaded.
    const lateHandler = ['-e', "setTimeout(() => process.on('SIGTERM', () => process.exit(0)), 1000); setInterval(() => undefined, 1000);"];
    const { sup, exits } = supervisor({ workerArgs: () => lateHandler });
    sup.start();
    await new Promise((r) => setTimeout(r, 200));
    expect(await sup.stop()).toBe(0);
    expect(exits).toEqual([{ device: 0, code: null }]);
  });

  it('a worker that dies of the group\'s SIGHUP or SIGINT while node still loads (before any handler) is a clean stop too: exit 0, not 1', async () => {
    for (const signal of ['SIGHUP', 'SIGINT']) {
      // The terminal's signal reaches the group with the supervisor's SIGTERM: the stand-in dies of it.
      const groupSignal = ['-e', `process.on('SIGTERM', () => process.kill(process.pid, '${signal}')); setInterval(() => undefined, 1000);`];
      const { sup, exits } = supervisor({ workerArgs: () => groupSignal });
      sup.start();
      await new Promise((r) => setTimeout(r, 500));
      expect(await sup.stop(), signal).toBe(0);
      expect(exits).toEqual([{ device: 0, code: null }]);
    }
  });
});

describe('Supervisor log of a worker exit', () => {
  it('says what the exit code or signal means (device hang, bad config, killed), not only the number', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    // One incarnation each: a device hang (75), a config error (2), a SIGKILL (out of memory), then one that runs on.
    const incarnations = ['process.exit(75)', 'process.exit(2)', "process.kill(process.pid, 'SIGKILL')", "process.on('SIGTERM', () => process.exit(0)); setInterval(() => undefined, 1000);"];
    const { sup } = supervisor({ log, workerArgs: (_device, restarts) => ['-e', incarnations[Math.min(restarts, incarnations.length - 1)] ?? ''] });
    sup.start();
    await until(() => lines.filter((l) => l.msg === 'worker exited; restarting').length === 3);
    await new Promise((r) => setTimeout(r, 500));
    await sup.stop();
    const reasons = lines.filter((l) => l.msg === 'worker exited; restarting').map((l) => String(l.reason));
    expect(reasons[0]).toMatch(/device hang/);
    expect(reasons[1]).toMatch(/invalid config/);
    expect(reasons[2]).toMatch(/SIGKILL.*out of memory/);
  });
});

describe('Supervisor on a worker that keeps failing', () => {
  it('says so at error level every failingAfterExits exits in a row, and keeps restarting it', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    const { sup, exits } = supervisor({ log, failingAfterExits: 3, workerArgs: () => ['-e', 'process.exit(1)'] });
    sup.start();
    await until(() => exits.length >= 7);
    await sup.stop();
    const failing = lines.filter((l) => String(l.msg).startsWith('worker keeps failing'));
    // Before, each exit was one warning 'worker exited; restarting' like any other.
    expect(failing.map((l) => l.exits)).toEqual([3, 6]);
    expect(failing[0]).toMatchObject({ level: 50, device: 0, code: 1, reason: expect.stringMatching(/failed to start/) as unknown });
    expect(Number(failing[1]?.failingForMs)).toBeGreaterThan(Number(failing[0]?.failingForMs));
    expect(lines.filter((l) => l.msg === 'worker exited; restarting').length).toBeGreaterThanOrEqual(7);
  });
});

describe('Supervisor on a worker that exits 2 (bad config or command line)', () => {
  /** A worker refused its config as main does: its error line on stderr, exit 2. */
  const REFUSED = ['-e', "process.stderr.write('npu-fleet: invalid fleet config b.yaml: devices.count (set by NPU_FLEET__DEVICES__COUNT): expected a number\\n'); process.exitCode = 2;"];

  it('stops restarting once every device exited 2 usageExitsToGiveUp times in a row: gaveUp names its error, stop() exits 2', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    const { sup, exits } = supervisor({ log, deviceIds: [0, 1], usageExitsToGiveUp: 3, workerArgs: () => REFUSED });
    sup.start();
    const gaveUp = await Promise.race([sup.gaveUp, new Promise<'never'>((r) => setTimeout(() => r('never'), 15_000))]);
    expect(gaveUp).toMatchObject({ exits: 3, error: 'invalid fleet config b.yaml: devices.count (set by NPU_FLEET__DEVICES__COUNT): expected a number' });
    // Well past the backoff (at most 200 ms here): a restart loop would have exited again by now.
    await new Promise((r) => setTimeout(r, 1_000));
    const counted = (device: number): number => exits.filter((e) => e.device === device).length;
    const last = (gaveUp as { deviceId: number }).deviceId;
    expect(counted(last)).toBe(3);
    expect(counted(1 - last), 'the device that got there first is restarted on until the other does').toBeGreaterThanOrEqual(3);
    expect(sup.pids()).toEqual({ 0: undefined, 1: undefined });
    expect(lines.find((l) => l.level === 50 && l.device === last && String(l.msg).includes('not restarting it'))).toMatchObject({ code: 2, exits: 3 });
    expect(await sup.stop('worker refused its config', 2)).toBe(2);
    expect(lines.at(-1)).toMatchObject({ level: 40, code: 2, msg: expect.stringContaining('supervisor exiting with code 2 (worker refused its config)') as unknown });
  });

  it('while another device serves, restarts the one that keeps exiting 2 with backoff, loudly: what it refused can be passing (a model config.yaml mid-edit)', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    // Device 0 refuses 4 starts, then starts (its repository fixed); device 1 serves all along.
    const { sup, exits } = supervisor({
      log,
      deviceIds: [0, 1],
      usageExitsToGiveUp: 3,
      workerArgs: (device, restarts) => (device === 0 && restarts < 4 ? REFUSED : DRAINING_WORKER),
    });
    sup.start();
    const outcome = await Promise.race([sup.gaveUp.then(() => 'gave up'), until(() => sup.restarts[0] === 4 && sup.pids()[0] !== undefined).then(() => 'serving')]);
    // Before, the fleet stopped at the third exit 2 of device 0, serving device 1 and all.
    expect(outcome).toBe('serving');
    expect(exits.filter((e) => e.device === 0).map((e) => e.code)).toEqual([2, 2, 2, 2]);
    expect(sup.pids()[1]).toBeDefined();
    expect(lines.filter((l) => l.level === 50 && l.device === 0 && String(l.msg).includes("not every device's worker has (the others may serve)")).map((l) => l.exits)).toEqual([3, 4]);
    expect(await sup.stop()).toBe(0);
    expect(exits).toContainEqual({ device: 1, code: 0 });
  });

  it('counts only exits 2 in a row: another exit between them (a worker that ran, then met a hot-edited config) starts the count again', async () => {
    // Incarnations: 2, then a hang (75), then 2 for good: it gives up at the third 2 after the hang.
    const incarnation = (restarts: number): string[] => (restarts === 1 ? ['-e', 'process.exit(75)'] : REFUSED);
    const { sup, exits } = supervisor({ usageExitsToGiveUp: 3, workerArgs: (_device, restarts) => incarnation(restarts) });
    sup.start();
    const gaveUp = await Promise.race([sup.gaveUp, new Promise<'never'>((r) => setTimeout(() => r('never'), 15_000))]);
    expect(gaveUp).toMatchObject({ deviceId: 0, exits: 3 });
    expect(exits.map((e) => e.code)).toEqual([2, 75, 2, 2, 2]);
    await new Promise((r) => setTimeout(r, 1_000));
    expect(exits).toHaveLength(5);
    expect(await sup.stop('refused', 2)).toBe(2);
  });

  it('a worker that exits 2 without an error line is named by its exit reason', async () => {
    const { sup } = supervisor({ usageExitsToGiveUp: 1, workerArgs: () => ['-e', 'process.exit(2)'] });
    sup.start();
    expect((await sup.gaveUp).error).toMatch(/invalid config or command line/);
    await sup.stop();
  });
});
