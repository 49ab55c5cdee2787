import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { hungModelRepo } from '../../helpers/hung-model-repo.ts';
import { spawnCli } from '../../helpers/spawn-cli.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

/**
 * A stop signal that comes while the CLI is still loading, or while the embedded fleet starts: it
 * must stop the process at once. As PID 1 (a container without an init) a signal with no handler
 * is ignored: the container then waited out its whole grace period.
 */

/** A config on a repository whose model load never returns: start-up lasts until a signal ends it. */
function hungConfig(command: 'start' | 'worker'): { configFile: string; release: () => void } {
  const { repo, release } = hungModelRepo();
  const configFile = join(tempDir('npu-fleet-start-signals-'), 'fleet.yaml');
  // A worker process refuses the memory transport (no producer could reach it); its start-up hangs
  // in the model load, before the broker is contacted, so an unreachable one does.
  const transport = command === 'worker' ? { kind: 'bullmq', bullmq: { redisUrl: 'redis://127.0.0.1:1' } } : { kind: 'memory' };
  writeFileSync(configFile, stringify({ transport, modelRepository: repo, devices: { count: 1, backend: 'sim' }, models: ['mlp-classifier'], worker: { metricsPort: 0 }, ...(command === 'start' ? { log: { level: 'info' } } : {}) }));
  return { configFile, release };
}

/** `npu-fleet ARGS` as PID 1 of a new PID namespace (unshare, as root), and the host pid of that PID 1. */
function spawnAsPid1(args: readonly string[]) {
  const child = spawn('unshare', ['--fork', '--pid', '--mount-proc', process.execPath, 'bin/npu-fleet.js', ...args], { env: { ...process.env, NPU_FLEET_DEVICE: 'sim' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr.on('data', (b: Buffer) => (out += b.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const pid1 = (): number | undefined => {
    try {
      const pid = Number(readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim().split(' ')[0]);
      return pid > 0 ? pid : undefined;
    } catch {
      return undefined;
    }
  };
  return { child, exited, pid1, output: () => out };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function exitWithin(exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>, ms: number) {
  return await Promise.race([exited, sleep(ms).then(() => 'still running' as const)]);
}

describe('a stop signal during start-up', () => {
  it('as PID 1, SIGTERM while the embedded fleet starts (model load hung) exits 0 at once instead of being ignored', async () => {
    const { configFile, release } = hungConfig('start');
    const fleet = spawnAsPid1(['start', '--config', configFile]);
    try {
      const deadline = Date.now() + 30_000;
      while (!fleet.output().includes('serving /metrics') && Date.now() < deadline) await sleep(50);
      expect(fleet.output(), 'the embedded worker is starting').toContain('serving /metrics');
      const pid = fleet.pid1();
      expect(pid).toBeDefined();
      process.kill(pid as number, 'SIGTERM');
      // The exit waits for the hung load only the addon's exit grace (2 s).
      const result = await exitWithin(fleet.exited, 10_000);
      expect(result, fleet.output()).toEqual({ code: 0, signal: null });
      expect(fleet.output()).toContain('stopped during start-up; nothing to drain');
    } finally {
      release();
      // PID 1 first: its unshare parent's children list names it.
      const pid = fleet.pid1();
      try {
        if (pid !== undefined) process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
      fleet.child.kill('SIGKILL');
    }
  }, 60_000);

  it('as PID 1, SIGTERM while node loads the CLI (before any command handler) exits 0 at once instead of being ignored', async () => {
    const { configFile, release } = hungConfig('worker');
    const worker = spawnAsPid1(['worker', '--device', '0', '--config', configFile]);
    try {
      const deadline = Date.now() + 10_000;
      while (worker.pid1() === undefined && Date.now() < deadline) await sleep(10);
      const pid = worker.pid1();
      expect(pid).toBeDefined();
      // The CLI takes ~1 s to load (the TypeScript loader, the modules); node itself ~0.1 s, before
      // which no handler can exist: three tries inside the load.
      for (const atMs of [200, 350, 500]) {
        await sleep(atMs === 200 ? 200 : 150);
        process.kill(pid as number, 'SIGTERM');
      }
      const result = await exitWithin(worker.exited, 10_000);
      expect(result, worker.output()).toEqual({ code: 0, signal: null });
      expect(worker.output()).toContain('SIGTERM before worker started');
      expect(worker.output(), 'it stopped before its start-up began').not.toContain('serving /metrics');
    } finally {
      release();
      // PID 1 first: its unshare parent's children list names it.
      const pid = worker.pid1();
      try {
        if (pid !== undefined) process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
      worker.child.kill('SIGKILL');
    }
  }, 60_000);

  it('not PID 1, SIGTERM while node loads the CLI exits 0 (a clean stop), not by the signal', async () => {
    const { configFile, release } = hungConfig('worker');
    const worker = spawnCli(['worker', '--device', '0', '--config', configFile], { NPU_FLEET_DEVICE: 'sim' });
    try {
      await sleep(300);
      worker.child.kill('SIGTERM');
      const result = await exitWithin(worker.exited, 10_000);
      if (result === 'still running') worker.child.kill('SIGKILL');
      expect(result, worker.output()).toEqual({ code: 0, signal: null });
      expect(worker.output()).not.toContain('serving /metrics');
    } finally {
      release();
    }
  }, 60_000);
});
