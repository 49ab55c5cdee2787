import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempDir } from '../../helpers/temp-dir.ts';

const BIN = resolve('bin/npu-fleet.js');

/** `npu-fleet start --demo` run from a directory that is not the repository (an installed CLI). */
describe('npu-fleet start --demo outside the repository', () => {
  // The default modelRepository (examples/models) was taken relative to the working directory:
  // from anywhere else the demo failed with "model repository <cwd>/examples/models is not a directory".
  it('serves the demo from the example models of the install, and drains to exit 0 on SIGTERM', async () => {
    const cwd = tempDir('npu-fleet-elsewhere-');
    const child = spawn(process.execPath, [BIN, 'start', '--demo', '--devices', '1'], {
      cwd,
      env: { ...process.env, NPU_FLEET_DEVICE: 'sim', NPU_FLEET__WORKER__METRICS_PORT: '0', NPU_FLEET__DEMO__REQUESTS_PER_SECOND: '50', NPU_FLEET_CONFIG: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (out += b.toString()));
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    const deadline = Date.now() + 30_000;
    while (!/throughput [1-9]/.test(out) && child.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    child.kill('SIGTERM');
    const code = await Promise.race([exited, new Promise<string>((r) => setTimeout(() => r('no exit within 20 s'), 20_000))]);
    if (code !== 0) child.kill('SIGKILL');
    expect(out).not.toContain(join(cwd, 'examples'));
    expect(out, 'the demo load was answered').toMatch(/throughput [1-9]/);
    expect(code, out).toBe(0);
  }, 60_000);
});
