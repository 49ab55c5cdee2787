/**
 * A device left open at process exit is torn down (aclmdlUnload, aclrtFree, aclrtDestroyContext,
 * aclrtResetDevice, then aclFinalize) from the process 'exit' event, on the JS thread, before C
 * exit() starts. Done from an atexit handler instead, it runs after the static destructors of
 * every ACL singleton constructed after that handler was registered (C++ destroys in reverse
 * order), i.e. inside a half-destroyed libascendcl.so: reference/acl-api.md §2 / §10 (do not
 * finalize from destructors, the singleton destruction order at exit is unknown). The simulator
 * keeps no static state to destroy, so only the ordering can be checked here.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..', '..');
const CHILD = join(import.meta.dirname, 'support', 'exit-order-child.ts');

function runChild(mode: 'exit' | 'drain'): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', CHILD, mode], {
    cwd: ROOT,
    env: { ...process.env, NPU_FLEET_DEVICE: 'sim' },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('device teardown at process exit', () => {
  it('has stopped every device thread by the time later exit listeners run (process.exit)', () => {
    const r = runChild('exit');
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('live at exit: 0\n');
    expect(r.status).toBe(0);
  });

  it('has stopped every device thread by the time later exit listeners run (event loop drained)', () => {
    const r = runChild('drain');
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('live at exit: 0\n');
    expect(r.status).toBe(0);
  });
});
