/**
 * An open device never keeps a finished process alive, and process.exit() with work in flight
 * tears the device down through the env cleanup hook (waiting for the device) instead of
 * crashing. Each case runs in a child process.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..');
const CHILD = join(import.meta.dirname, 'support', 'exit-child.ts');

/** exitMs: from the child's process.exit() call (it prints the time) until it has ended. */
function runChild(mode: string, env: Record<string, string> = {}, exitCode = 0): { status: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string; exitMs: number } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', CHILD, mode, String(exitCode)], {
    cwd: ROOT,
    env: { ...process.env, NPU_FLEET_DEVICE: 'sim', ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
  const endedAt = Date.now();
  const exitingAt = Number(/^exiting (\d+)$/m.exec(r.stdout)?.[1] ?? endedAt);
  return { status: r.status, signal: r.signal, stdout: r.stdout.replace(/^exiting \d+$/m, 'exiting'), stderr: r.stderr, exitMs: endedAt - exitingAt };
}

describe('process lifetime with open devices', () => {
  it('crash@value=V kills the process that executes the poison input (SIGABRT), and only that input', () => {
    const clean = runChild('run-value', { NPU_FLEET_SIM_FAULTS: 'crash@value=4242' }, 1);
    expect(clean.stdout).toBe('ran\n');
    expect(clean.status).toBe(0);
    const r = runChild('run-value', { NPU_FLEET_SIM_FAULTS: 'crash@value=4242' }, 4242);
    expect(r.signal).toBe('SIGABRT');
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/acl-sim: injected fault 'crash@value=4242': execution 1 of model \d+ on device 0 crashes the process/);
  });

  it('exits on its own when a device is left open and idle', () => {
    const r = runChild('idle-open');
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('ran\n');
    expect(r.status).toBe(0);
  });

  it('closes the device at process.exit() while an execution is in flight', () => {
    const r = runChild('exit-inflight', { NPU_FLEET_SIM_FAULTS: 'hang@1:600ms' });
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('exiting\n');
    expect(r.status).toBe(0);
    // Teardown waited for the hung execution (the exit came 50 ms into a 600 ms hang).
    expect(r.exitMs).toBeGreaterThanOrEqual(450);
  });

  it('leaves promptly with the exit code when the device hangs past the grace period', () => {
    const r = runChild('exit-inflight', { NPU_FLEET_SIM_FAULTS: 'hang@1', NPU_FLEET_EXIT_GRACE_MS: '500' }, 7);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('exiting\n');
    expect(r.status).toBe(7);
    expect(r.exitMs).toBeGreaterThanOrEqual(450); // waited the grace period...
    expect(r.exitMs).toBeLessThan(5_000); // ...but not for the hang, which never ends
  });
});
