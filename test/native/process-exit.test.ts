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

function runChild(mode: string, env: Record<string, string> = {}): { status: number | null; stdout: string; stderr: string; ms: number } {
  const t0 = performance.now();
  const r = spawnSync(process.execPath, ['--import', 'tsx', CHILD, mode], {
    cwd: ROOT,
    env: { ...process.env, NPU_FLEET_DEVICE: 'sim', ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, ms: performance.now() - t0 };
}

describe('process lifetime with open devices', () => {
  it('exits on its own when a device is left open and idle', () => {
    const r = runChild('idle-open');
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('ran\n');
    expect(r.status).toBe(0);
  });

  it('closes the device at process.exit() while an execution is in flight', () => {
    const quick = runChild('exit-inflight');
    const r = runChild('exit-inflight', { NPU_FLEET_SIM_FAULTS: 'hang@1:600ms' });
    for (const run of [quick, r]) {
      expect(run.stderr).toBe('');
      expect(run.stdout).toBe('exiting\n');
      expect(run.status).toBe(0);
    }
    // Teardown waited for the hung execution (the exit came 50 ms into a 600 ms hang).
    expect(r.ms - quick.ms).toBeGreaterThanOrEqual(350);
  });
});
