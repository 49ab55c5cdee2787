import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { EXIT_START_TIMEOUT } from '../../../src/runtime/worker-process.ts';
import { hungModelRepo } from '../../helpers/hung-model-repo.ts';
import { spawnCli } from '../../helpers/spawn-cli.ts';
import { spawnCliHead } from '../../helpers/spawn-cli-head.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { writeDemoFleetConfig } from '../../helpers/write-demo-fleet-config.ts';

/** `npu-fleet start` on the embedded memory fleet, as `npm start` runs it, but as a process. */
describe('npu-fleet start (embedded memory fleet)', () => {
  it('prints a report line a second, logs one component per line, and drains to exit 0 on SIGTERM', async () => {
    const configFile = writeDemoFleetConfig('npu-fleet-start-', { devices: 2, requestsPerSecond: 200, logLevel: 'info' });
    const { child, exited, output } = spawnCli(['start', '--config', configFile], { NPU_FLEET_DEVICE: 'sim' });
    const reports = (): string[] => output().split('\n').filter((l) => l.startsWith('throughput '));
    const deadline = Date.now() + 30_000;
    while (reports().length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    child.kill('SIGTERM');
    const code = await Promise.race([exited.then((e) => e.code), new Promise<string>((r) => setTimeout(() => r('no exit within 20 s'), 20_000))]);
    if (code !== 0) child.kill('SIGKILL');
    const out = output();
    expect(code, out).toBe(0);

    expect(reports().length, out).toBeGreaterThanOrEqual(2);
    for (const line of reports()) {
      expect(line).toMatch(/^throughput \d+ req\/s \| p50 [\d.]+ ms \| p99 [\d.]+ ms \| batch fill \d+% \| ok \d+ late \d+ expired \d+ rejected \d+ invalid \d+ failed \d+$/);
    }
    expect(reports().some((l) => !/ ok 0 /.test(l)), 'the demo load was answered').toBe(true);

    const logLines = out.split('\n').filter((l) => l.startsWith('{'));
    const worker = logLines.filter((l) => l.includes('"component":"worker"'));
    expect(worker.length, out).toBeGreaterThan(0);
    for (const line of logLines) {
      expect(line.match(/"component":/g)?.length ?? 0, line).toBeLessThanOrEqual(1);
      expect(() => JSON.parse(line) as unknown, line).not.toThrow();
    }
    expect(logLines.some((l) => l.includes('"component":"supervisor"') && l.includes('draining embedded fleet')), out).toBe(true);
    expect(worker.filter((l) => l.includes('"msg":"drained"')).map((l) => (JSON.parse(l) as { device: number }).device).sort()).toEqual([0, 1]);
  }, 60_000);

  it('a second stop signal during the drain exits 1 saying so, instead of dying of the signal with no word', async () => {
    const configFile = writeDemoFleetConfig('npu-fleet-start-twice-', { devices: 1, requestsPerSecond: 50, logLevel: 'info', worker: { hangLimitMs: 60_000 } });
    // Every batch takes 1.5 s on the device, so the drain after the first signal has one to wait for.
    const { child, exited, output } = spawnCli(['start', '--config', configFile], { NPU_FLEET_DEVICE: 'sim', NPU_FLEET_SIM_PROFILE: 'base=1500ms,perItem=0ms' });
    const deadline = Date.now() + 30_000;
    while (!output().includes('throughput ') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    child.kill('SIGINT');
    const draining = Date.now() + 10_000;
    while (!output().includes('draining embedded fleet') && Date.now() < draining) await new Promise((r) => setTimeout(r, 20));
    child.kill('SIGINT');
    const result = await Promise.race([exited, new Promise<'no exit'>((r) => setTimeout(() => r('no exit'), 10_000))]);
    if (result === 'no exit') child.kill('SIGKILL');
    expect(result, output()).toEqual({ code: 1, signal: null });
    expect(output()).toMatch(/second stop signal/);
  }, 60_000);

  it('stdout closed by its reader (`npu-fleet start | head -1`): drains as on SIGTERM and exits 0, without an EPIPE crash', async () => {
    const configFile = writeDemoFleetConfig('npu-fleet-start-epipe-', { devices: 1, requestsPerSecond: 50, logLevel: 'warn' });
    // Like `head -1`: read one line, then close the pipe's only read end.
    const run = spawnCliHead(['start', '--config', configFile], 1, { NPU_FLEET_DEVICE: 'sim' });
    const result = await Promise.race([run.exited, new Promise<'no exit'>((r) => setTimeout(() => r('no exit'), 40_000))]);
    if (result === 'no exit') run.child.kill('SIGKILL');
    const firstLine = run.stdout();
    const stderr = run.stderr();
    expect(firstLine).toMatch(/^npu-fleet: 1 worker\(s\) on the memory broker/);
    expect(stderr).not.toMatch(/Unhandled|EPIPE\n|at .*\.ts:\d+/);
    expect(result, stderr).toEqual({ code: 0, signal: null });
    expect(stderr).toMatch(/stdout closed \(EPIPE\): draining the embedded fleet as on SIGTERM/);
  }, 60_000);

  it('a worker start-up that hangs (model load blocked) ends the embedded fleet with EXIT_START_TIMEOUT (72) past worker.startTimeoutMs', async () => {
    const { repo, fifo, release } = hungModelRepo();
    const configFile = join(tempDir('npu-fleet-start-'), 'fleet.yaml');
    writeFileSync(configFile, stringify({ transport: { kind: 'memory' }, modelRepository: repo, devices: { count: 1, backend: 'sim' }, models: ['mlp-classifier'], worker: { metricsPort: 0, startTimeoutMs: 1_500 } }));
    const run = spawnCli(['start', '--config', configFile], { NPU_FLEET_DEVICE: 'sim' });
    try {
      const result = await Promise.race([run.exited, new Promise<'slow'>((r) => setTimeout(() => r('slow'), 20_000))]);
      if (result === 'slow') run.child.kill('SIGKILL');
      expect(result, run.output()).toEqual({ code: EXIT_START_TIMEOUT, signal: null });
      expect(run.output()).toContain(`loading ${fifo}`);
    } finally {
      release();
    }
  }, 60_000);

  it('refuses --demo on a broker config instead of starting the fleet without the demo it asked for', async () => {
    const dir = tempDir('npu-fleet-start-demo-');
    const configFile = join(dir, 'fleet.yaml');
    writeFileSync(
      configFile,
      stringify({
        transport: { kind: 'kafka', kafka: { brokers: ['127.0.0.1:1'] } },
        devices: { count: 1, backend: 'sim' },
        worker: { metricsPort: 0 },
      }),
    );
    const child = spawn(process.execPath, ['bin/npu-fleet.js', 'start', '--config', configFile, '--demo'], {
      env: { ...process.env, NPU_FLEET_DEVICE: 'sim' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (out += b.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const code = await Promise.race([exited, new Promise<string>((r) => setTimeout(() => r('still running after 15 s'), 15_000))]);
    // Whole group: on a fleet that did start, its worker processes too.
    if (typeof code === 'string' && child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
    expect(code, out).toBe(2);
    expect(out).toMatch(/--demo/);
    expect(out).toMatch(/transport\.kind is kafka/);
    expect(out).toMatch(/npu-fleet load/);
  }, 30_000);
});
