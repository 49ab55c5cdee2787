import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { writeDemoFleetConfig } from '../../helpers/write-demo-fleet-config.ts';

/** Which stream `npu-fleet start` writes what to, as `npm start` runs it. */
describe('npu-fleet start (embedded demo): stdout and stderr', () => {
  // The JSON logs came on stdout between the per-second status lines; every other command logs to stderr.
  it('writes only its status lines to stdout and its JSON logs to stderr', async () => {
    const configFile = writeDemoFleetConfig('npu-fleet-start-streams-', { devices: 1, requestsPerSecond: 100, logLevel: 'info' });
    const child = spawn(process.execPath, ['bin/npu-fleet.js', 'start', '--config', configFile], {
      env: { ...process.env, NPU_FLEET_DEVICE: 'sim' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    const deadline = Date.now() + 30_000;
    while ((stdout.match(/^throughput /gm)?.length ?? 0) < 2 && child.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    child.kill('SIGTERM');
    const code = await Promise.race([exited, new Promise<string>((r) => setTimeout(() => r('no exit within 20 s'), 20_000))]);
    if (code !== 0) child.kill('SIGKILL');
    expect(code, stderr).toBe(0);
    const lines = stdout.split('\n').filter((l) => l !== '');
    expect(lines.filter((l) => l.startsWith('throughput ')).length, stdout).toBeGreaterThanOrEqual(2);
    for (const line of lines) expect(line, 'a status line').toMatch(/^(throughput |npu-fleet: \d+ worker\(s\) on the memory broker)/);
    const logs = stderr.split('\n').filter((l) => l.startsWith('{'));
    expect(logs.some((l) => l.includes('"msg":"worker ready"') || l.includes('"msg":"drained"')), stderr).toBe(true);
    expect(logs.some((l) => l.includes('draining embedded fleet')), stderr).toBe(true);
    // Its last line says it exits, why and with what code.
    expect(logs.at(-1), stderr).toMatch(/"reason":"SIGTERM","code":0,"msg":"embedded fleet exiting with code 0 \(SIGTERM\)"/);
  }, 60_000);
});
