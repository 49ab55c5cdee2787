import { execFileSync, spawn } from 'node:child_process';
import { cpSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { startRepositoryPoll, type RepositoryPoll } from '../../../src/runtime/repository-poll.ts';
import { runWorker, type RunningWorker } from '../../../src/runtime/worker-process.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { MODEL, controlledDevice, until } from './fake-device-worker.ts';

const started: RunningWorker[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map(async (w) => w.stop()));
});

/** Longest gap between ticks of a 10 ms interval over `ms`: how long the event loop stood still. */
async function longestStallMs(ms: number): Promise<number> {
  let last = Date.now();
  let longest = 0;
  const tick = setInterval(() => {
    const now = Date.now();
    longest = Math.max(longest, now - last);
    last = now;
  }, 10);
  await new Promise((r) => setTimeout(r, ms));
  clearInterval(tick);
  return Math.max(longest, Date.now() - last);
}

describe('the worker repository poll on a file system that blocks', () => {
  it('keeps the event loop turning (/healthz answers) while a read of the repository hangs', async () => {
    const repo = join(tempDir('npu-fleet-poll-'), 'models');
    cpSync(join('examples/models', MODEL), join(repo, MODEL), { recursive: true });
    const configPath = join(repo, MODEL, 'config.yaml');
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    const config = parseFleetConfig({ modelRepository: repo, models: [MODEL], devices: { count: 1, backend: 'sim' }, worker: { metricsPort: 0 } });
    const broker = new MemoryBroker();
    const dev = controlledDevice();
    const running = await runWorker(config, 0, { artifact: 'onnx', openDevice: () => Promise.resolve(dev.device), createTransport: () => new MemoryTransport({ broker }) }, { log, metricsPort: 0 });
    started.push(running);

    // config.yaml turns into a named pipe: reading it blocks until a writer comes, as a read on a
    // hung NFS mount blocks until the server answers. The writer comes after 2.5 s (a bound, so a
    // poll that blocks the event loop fails this test instead of hanging it); once it has the pipe
    // open, it puts the file back before writing, so no later poll waits on the pipe.
    const saved = join(repo, '.config.yaml.saved');
    renameSync(configPath, saved);
    execFileSync('mkfifo', [configPath]);
    const writer = spawn('sh', ['-c', 'sleep 2.5; exec 3>"$2"; cp "$1" "$2.new"; mv "$2.new" "$2"; cat "$1" >&3; exec 3>&-', 'sh', saved, configPath], { stdio: 'ignore' });
    let exited = false;
    writer.once('exit', () => (exited = true));

    const stall = longestStallMs(2_000);
    const health = await fetch(`http://127.0.0.1:${running.metricsPort}/healthz`);
    expect(health.status).toBe(200);
    expect(await stall).toBeLessThan(500);
    // The writer got the pipe open only because a poll opened it to read; it read to the end.
    await until(() => exited, 10_000, 'the writer to get through to a reader');
    expect(running.worker.status).toBe('running');
    expect(lines.filter((l) => (l.level as number) >= 50)).toEqual([]);
  }, 20_000);
});

describe('startRepositoryPoll', () => {
  function harness(scanLimitMs: number) {
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    const scans: Array<(n: number) => void> = [];
    const applied: number[] = [];
    let slow = 0;
    const poll = startRepositoryPoll<number>({
      dir: '/models/on-nfs',
      intervalMs: 20,
      scanLimitMs,
      log,
      active: () => true,
      scan: () => new Promise<number>((resolve) => scans.push(resolve)),
      apply: (n) => {
        applied.push(n);
        return Promise.resolve();
      },
      onSlowScan: () => slow++,
    });
    polls.push(poll);
    return { lines, scans, applied, slow: () => slow, poll };
  }
  const polls: RepositoryPoll[] = [];
  afterEach(() => {
    for (const p of polls.splice(0)) p.stop();
  });

  it('starts no scan while one is stuck, warns naming the directory once it is past its limit and counts it, then polls on once it returns', async () => {
    const h = harness(100);
    await until(() => h.scans.length === 1, 1_000, 'the first scan');
    // Ten intervals and more: the stuck scan is the only one.
    await new Promise((r) => setTimeout(r, 400));
    expect(h.scans).toHaveLength(1);
    expect(h.slow()).toBe(1);
    const warned = h.lines.filter((l) => l.level === 40);
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ dir: '/models/on-nfs', scanLimitMs: 100 });
    expect(String(warned[0]?.msg)).toContain('/models/on-nfs');

    // The mount answers: what the late scan found applies, and polling resumes.
    h.scans[0]?.(7);
    await until(() => h.scans.length === 2, 1_000, 'the next scan');
    expect(h.applied).toEqual([7]);
    h.scans[1]?.(8);
    await until(() => h.applied.length === 2, 1_000, 'the second scan applied');
    expect(h.slow()).toBe(1);
  });

  it('a scan within its limit is neither warned about nor counted; a scan returning after stop() is not applied', async () => {
    const h = harness(10_000);
    await until(() => h.scans.length === 1, 1_000, 'the first scan');
    h.scans[0]?.(1);
    await until(() => h.scans.length === 2, 1_000, 'the second scan');
    h.poll.stop();
    h.scans[1]?.(2);
    await new Promise((r) => setTimeout(r, 100));
    expect(h.applied).toEqual([1]);
    expect(h.scans).toHaveLength(2);
    expect(h.slow()).toBe(0);
    expect(h.lines.filter((l) => (l.level as number) >= 40)).toEqual([]);
  });

  it('a scan failing the same way poll after poll (a volume unmounted for hours) is logged once, its return once', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    let fail: string | undefined = 'model repository /models/on-nfs is empty now';
    let scans = 0;
    const applied: number[] = [];
    polls.push(
      startRepositoryPoll<number>({
        dir: '/models/on-nfs',
        intervalMs: 10,
        scanLimitMs: 10_000,
        log,
        active: () => true,
        scan: () => (++scans, fail === undefined ? Promise.resolve(scans) : Promise.reject(new Error(fail))),
        apply: (n) => (applied.push(n), Promise.resolve()),
        onSlowScan: () => undefined,
      }),
    );
    await until(() => scans >= 20, 2_000, '20 failed scans');
    fail = 'cannot read /models/on-nfs/a (ESTALE)';
    const at = scans;
    await until(() => scans >= at + 5, 2_000, '5 scans failing another way');
    fail = undefined;
    await until(() => applied.length >= 3, 2_000, 'scans applied again');
    const errors = lines.filter((l) => l.level === 50);
    expect(errors.map((l) => (l.err as { message: string }).message)).toEqual(['model repository /models/on-nfs is empty now', 'cannot read /models/on-nfs/a (ESTALE)']);
    const back = lines.filter((l) => l.level === 30);
    expect(back).toHaveLength(1);
    expect(back[0]).toMatchObject({ dir: '/models/on-nfs' });
    expect(back[0]?.failedPolls).toBeGreaterThanOrEqual(25);
  });
});
