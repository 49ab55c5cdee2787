/**
 * A worker thread's env teardown finalizes ACL only when no device in the process uses it, and
 * decides that atomically with respect to devices being opened. Before the fix the teardown
 * checked a live-device counter and then, unsynchronized with openDevice on another thread,
 * called aclFinalize: a device opened in that gap lost its context and models under it
 * (the simulator then fails every call on it; a real libascendcl.so is undefined behaviour).
 * NPU_FLEET_TEST_FINALIZE_DELAY_MS widens the gap to a deterministic 600 ms (a failpoint read
 * only at env teardown). Runs in a child process (support/finalize-race-child.ts).
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..');
const CHILD = join(import.meta.dirname, 'support', 'finalize-race-child.ts');

describe('a worker thread ending while another thread opens a device', () => {
  it('does not finalize ACL under the device', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', CHILD], {
      cwd: ROOT,
      env: { ...process.env, NPU_FLEET_DEVICE: 'sim', NPU_FLEET_TEST_FINALIZE_DELAY_MS: '600' },
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('before: right\nworker exited 0\nafter: right\nclosed\n');
    expect(r.status).toBe(0);
  });
});
