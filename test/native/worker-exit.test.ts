/**
 * A worker thread that ends (process.exit() inside it) with a batch hung on its device and two
 * more queued behind it, in a process whose main thread never loaded the addon. The worker's env
 * teardown gives the device NPU_FLEET_EXIT_GRACE_MS and then leaves it running; the process and
 * its main thread must carry on: the device thread finishes its work later without touching the
 * dead env (its ThreadSafeFunction, or the JS input buffers of the queued batches), and the main
 * thread opens another device and runs on it. Runs in a child process
 * (support/worker-exit-child.ts). Before the fixes the child exited with the worker's code from
 * the worker's exit, or died of SIGABRT when the hang ended; under npm run test:asan a queued
 * batch read its freed input (heap-use-after-free on stderr).
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..');
const CHILD = join(import.meta.dirname, 'support', 'worker-exit-child.ts');

describe('a worker thread exiting with a device busy', () => {
  it('leaves the process and its main thread running, and the hung batch finishes quietly', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', CHILD], {
      cwd: ROOT,
      env: {
        ...process.env,
        NPU_FLEET_DEVICE: 'sim',
        NPU_FLEET_SIM_FAULTS: 'dev0:hang@1:1500ms',
        NPU_FLEET_EXIT_GRACE_MS: '300',
        WORKER_EXIT_HANG_MS: '1500',
        // Under npm run test:asan: the promises and input references of the batches abandoned
        // with the worker's env cannot be released without that env (no N-API call is possible),
        // so LeakSanitizer would report those few node-side bytes at this child's exit.
        ASAN_OPTIONS: `${process.env['ASAN_OPTIONS'] ?? ''}:detect_leaks=0`,
      },
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('worker exited 3\nmain ran correctly\n');
    expect(r.status).toBe(0);
  });
});
