import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { startLocalRedis } from '../../helpers/local-redis-service.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { hungModelRepo } from '../../helpers/hung-model-repo.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { alive } from '../../helpers/until.ts';
import { spawnCli } from '../../helpers/spawn-cli.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { makeRequest } from '../transport/conformance-kit.ts';
import { bullmqSettings } from '../transport/bullmq-harness.ts';

/** `npu-fleet start` on BullMQ (one worker process per device), in its own process group as a shell runs it. */
function spawnFleet(devices: number, env: Record<string, string> = {}, over: { redisUrl?: string; drainTimeoutMs?: number; modelRepository?: string; models?: string[] } = {}) {
  const dir = tempDir('npu-fleet-supervised-');
  const configFile = join(dir, 'fleet.yaml');
  const prefix = uniqueName('supervised');
  writeFileSync(
    configFile,
    stringify({
      transport: { kind: 'bullmq', bullmq: { redisUrl: over.redisUrl ?? getServices().redisUrl, prefix } },
      devices: { count: devices, backend: 'sim' },
      ...(over.modelRepository === undefined ? {} : { modelRepository: over.modelRepository }),
      models: over.models ?? ['mlp-classifier'],
      worker: { metricsPort: 0, ...(over.drainTimeoutMs === undefined ? {} : { drainTimeoutMs: over.drainTimeoutMs }) },
      log: { level: 'info' },
    }),
  );
  const { child, exited, output, lines } = spawnCli(['start', '--config', configFile], { NPU_FLEET_DEVICE: 'sim', ...env }, { detached: true });
  return { child, exited, output, lines, prefix };
}

/**
 * A fleet that cannot run is refused at start: exit 2 within 20 s, no worker started, and its
 * output matching `says`. The fleet's process group is killed whatever happened.
 */
async function expectRefusedAtStart(fleet: ReturnType<typeof spawnFleet>, ...says: Array<string | RegExp>): Promise<void> {
  try {
    const result = await Promise.race([fleet.exited, new Promise<'slow'>((r) => setTimeout(() => r('slow'), 20_000))]);
    expect(result, fleet.output()).toEqual({ code: 2, signal: null });
    for (const said of says) {
      if (typeof said === 'string') expect(fleet.output()).toContain(said);
      else expect(fleet.output()).toMatch(said);
    }
    expect(fleet.lines('worker started'), 'no worker is started for a fleet that cannot run').toHaveLength(0);
  } finally {
    try {
      process.kill(-(fleet.child.pid as number), 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

async function until(cond: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!cond() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  return cond();
}

describe('npu-fleet start (one worker process per device)', () => {
  it('a worker still starting when its supervisor is SIGKILLed exits instead of living on as an orphan', async () => {
    const fleet = spawnFleet(1);
    let workerPid: number | undefined;
    try {
      expect(await until(() => fleet.lines('worker started').length === 1, 20_000), fleet.output()).toBe(true);
      workerPid = fleet.lines('worker started')[0]?.workerPid as number;
      expect(fleet.lines('worker ready'), 'the worker is still starting').toHaveLength(0);
      fleet.child.kill('SIGKILL');
      await fleet.exited;
      const pid = workerPid;
      expect(await until(() => !alive(pid), 40_000), `worker ${pid} still running without its supervisor\n${fleet.output()}`).toBe(true);
      expect(fleet.output()).toContain('supervisor is gone');
    } finally {
      if (workerPid !== undefined && alive(workerPid)) process.kill(workerPid, 'SIGKILL');
    }
  }, 90_000);

  it('devices.count beyond the devices the backend has is refused at start (exit 2, naming it) instead of restarting the missing devices\' workers for good', async () => {
    // The simulator has 2 devices (NPU_FLEET_SIM_DEVICES unset): a worker for device 2 can never start.
    const fleet = spawnFleet(3, { NPU_FLEET_SIM_DEVICES: '' });
    await expectRefusedAtStart(fleet, /devices\.count 3/, /2 device\(s\)/);
  }, 60_000);

  it('a modelRepository that is not a directory is refused at start (exit 2, naming the setting) instead of restarting workers that each exit 2 on it for good', async () => {
    const missing = join(tempDir('npu-fleet-no-repo-'), 'no-such-models');
    const fleet = spawnFleet(1, {}, { modelRepository: missing });
    await expectRefusedAtStart(fleet, `model repository ${missing} is not a directory (ENOENT); set modelRepository`);
  }, 60_000);

  it('a name in models the repository lacks (a typo) is refused at start (exit 2, naming it and the models there) instead of restarting workers that each exit 2 on it for good', async () => {
    const fleet = spawnFleet(1, {}, { models: ['mlp-clasifier'] });
    await expectRefusedAtStart(fleet, /models lists mlp-clasifier, which the model repository \S*examples\/models does not hold \(no mlp-clasifier\/config\.yaml\); it holds [^:]*\bmlp-classifier\b/);
  }, 60_000);

  it('a worker whose start-up hangs (model load blocked) exits 72 past worker.startTimeoutMs and is restarted with backoff, the reason named', async () => {
    const { repo, release } = hungModelRepo();
    // Bound and backoffs short (the hung load exceeds any bound): exits 72 at 1 s, restarts after 100 then 200 ms.
    const fleet = spawnFleet(1, { NPU_FLEET__WORKER__START_TIMEOUT_MS: '1000', NPU_FLEET__SUPERVISOR__RESTART_BACKOFF_MIN_MS: '100' }, { modelRepository: repo });
    try {
      expect(await until(() => fleet.lines('worker exited; restarting').length >= 2, 40_000), fleet.output()).toBe(true);
      const exits = fleet.lines('worker exited; restarting');
      expect(exits.map((l) => l.code)).toEqual([72, 72]);
      expect(String(exits[0]?.reason)).toMatch(/worker\.startTimeoutMs/);
      expect(exits.map((l) => l.backoffMs)).toEqual([100, 200]);
      expect(fleet.lines('worker ready')).toHaveLength(0);
    } finally {
      try {
        process.kill(-(fleet.child.pid as number), 'SIGKILL');
      } catch {
        // already gone
      }
      release();
    }
  }, 90_000);

  it('a worker that can never start (its worker.metricsPort held by another service) is restarted on, and after 5 exits in a row an error line says it keeps failing', async () => {
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen({ port: 0, host: '0.0.0.0' }, resolve));
    const port = (holder.address() as { port: number }).port;
    const fleet = spawnFleet(1, { NPU_FLEET__WORKER__METRICS_PORT: String(port), NPU_FLEET__SUPERVISOR__RESTART_BACKOFF_MIN_MS: '100', NPU_FLEET__SUPERVISOR__RESTART_BACKOFF_MAX_MS: '200' });
    try {
      // Before, each of its exits was one warning 'worker exited; restarting' among routine restarts.
      expect(await until(() => fleet.lines('worker exited; restarting').length >= 5, 60_000), fleet.output()).toBe(true);
      expect(await until(() => fleet.output().includes('"msg":"worker keeps failing'), 5_000), fleet.output()).toBe(true);
      const line = fleet.output().split('\n').find((l) => l.includes('"msg":"worker keeps failing'));
      expect(JSON.parse(line ?? '{}')).toMatchObject({ level: 50, component: 'supervisor', device: 0, exits: 5, code: 1, reason: expect.stringMatching(/failed to start/) as unknown });
      expect(fleet.output(), 'the worker names the port').toContain(`cannot listen on 0.0.0.0:${port}`);
      // Still restarting it: the port may free up (a predecessor's worker draining on it).
      expect(await until(() => fleet.lines('worker started').length >= 6, 20_000), fleet.output()).toBe(true);
      fleet.child.kill('SIGTERM');
      // 0, or 1 if the signal met a worker already exiting of the port.
      const result = await Promise.race([fleet.exited, new Promise<'slow'>((r) => setTimeout(() => r('slow'), 30_000))]);
      expect(result, fleet.output()).not.toBe('slow');
      expect(result, fleet.output()).toMatchObject({ signal: null });
    } finally {
      try {
        process.kill(-(fleet.child.pid as number), 'SIGKILL');
      } catch {
        // already gone
      }
      holder.close();
    }
  }, 120_000);

  it('SIGTERM a moment after start (workers still loading, nothing to drain) exits 0', async () => {
    const fleet = spawnFleet(2);
    try {
      expect(await until(() => fleet.lines('worker started').length === 2, 20_000), fleet.output()).toBe(true);
      fleet.child.kill('SIGTERM');
      const result = await Promise.race([fleet.exited, new Promise<'slow'>((r) => setTimeout(() => r('slow'), 30_000))]);
      expect(result, fleet.output()).toEqual({ code: 0, signal: null });
    } finally {
      try {
        process.kill(-(fleet.child.pid as number), 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }, 90_000);

  // Ctrl-C in a terminal signals the whole foreground process group, and systemd's default
  // KillMode=control-group signals every process of the unit: each worker gets the signal itself
  // and then the supervisor's forwarded SIGTERM a moment later. A terminal hangup (ssh session
  // gone) sends SIGHUP to the foreground group the same way.
  /** One fleet of its own: a slow batch on the device, `signal` to the whole group; what went wrong, named with the signal. */
  async function groupSignalDrains(signal: 'SIGINT' | 'SIGTERM' | 'SIGHUP'): Promise<void> {
    const fleet = spawnFleet(1, { NPU_FLEET_SIM_PROFILE: 'base=3000ms' });
    const producer = new BullmqProducer(bullmqSettings({ prefix: fleet.prefix }));
    const replyTo = uniqueName('group-signal-replies');
    const results = new Map<string, string>();
    const about = (): string => `${signal}\n${fleet.output()}`;
    try {
      // Three fleets start at once here: a longer bound than a lone fleet's.
      expect(await until(() => fleet.lines('worker ready').length === 1, 60_000), about()).toBe(true);
      await producer.subscribeReplies(replyTo, (r) => results.set(r.id, r.status));
      const input = { name: 'input', dtype: 'float32' as const, shape: [1, 64], data: new Uint8Array(64 * 4) };
      await producer.publish(Array.from({ length: 4 }, (_, i) => makeRequest('mlp-classifier', `g${i}`, 0, { replyTo, inputs: [input] })));
      await new Promise((r) => setTimeout(r, 1000)); // the batch is on the device
      expect(results.size, `${signal}: answered before the signal: the batch was not slow`).toBe(0);
      process.kill(-(fleet.child.pid as number), signal);
      const result = await Promise.race([fleet.exited, new Promise<'slow'>((r) => setTimeout(() => r('slow'), 30_000))]);
      expect(result, about()).toEqual({ code: 0, signal: null });
      expect(fleet.lines('drained'), about()).toHaveLength(1);
      expect(await until(() => results.size === 4, 10_000), about()).toBe(true);
      expect([...results.values()], signal).toEqual(['ok', 'ok', 'ok', 'ok']);
    } finally {
      try {
        process.kill(-(fleet.child.pid as number), 'SIGKILL');
      } catch {
        // already gone
      }
      await producer.close();
    }
  }

  // The three signals at once, each on a fleet of its own: the same path, and most of each run is
  // waiting (start-up, the 3 s batch, the drain), which the three then share.
  it('SIGINT, SIGTERM or SIGHUP to the whole process group drains the workers (the forwarded SIGTERM used to kill them mid-drain) and exits 0', async () => {
    const runs = await Promise.allSettled((['SIGINT', 'SIGTERM', 'SIGHUP'] as const).map((signal) => groupSignalDrains(signal)));
    for (const run of runs) if (run.status === 'rejected') throw run.reason;
  }, 120_000);

  it('a second SIGTERM during the drain forces the stop: the workers are killed and the supervisor exits 1, leaving no worker behind', async () => {
    // Batches of 20 s: the drain would take that long.
    const fleet = spawnFleet(1, { NPU_FLEET_SIM_PROFILE: 'base=20000ms' });
    const producer = new BullmqProducer(bullmqSettings({ prefix: fleet.prefix }));
    let workerPid: number | undefined;
    try {
      expect(await until(() => fleet.lines('worker ready').length === 1, 30_000), fleet.output()).toBe(true);
      workerPid = fleet.lines('worker started')[0]?.workerPid as number;
      const input = { name: 'input', dtype: 'float32' as const, shape: [1, 64], data: new Uint8Array(64 * 4) };
      await producer.publish([makeRequest('mlp-classifier', 'forced', 0, { replyTo: uniqueName('forced-replies'), inputs: [input] })]);
      await new Promise((r) => setTimeout(r, 1000)); // the batch is on the device
      fleet.child.kill('SIGTERM');
      expect(await until(() => fleet.lines('draining').length > 0, 5_000), fleet.output()).toBe(true);
      fleet.child.kill('SIGTERM');
      const result = await Promise.race([fleet.exited, new Promise<'slow'>((r) => setTimeout(() => r('slow'), 5_000))]);
      // It used to die of the second signal at once, its worker draining on as an orphan.
      expect(result, fleet.output()).toEqual({ code: 1, signal: null });
      expect(alive(workerPid), 'the worker outlived its supervisor').toBe(false);
      expect(fleet.output()).toContain('second signal');
    } finally {
      if (workerPid !== undefined && alive(workerPid)) process.kill(workerPid, 'SIGKILL');
      await producer.close();
    }
  }, 90_000);

  it('a drain that times out with a batch on the device and Redis frozen: the worker exits 71 by itself, before the supervisor\'s SIGKILL', async () => {
    // A Redis of its own, frozen (CLIENT PAUSE) once the batch of 20 s is on the device: the worker's
    // stop then takes every bound it has past the drain timeout, and its exit waits for the device.
    const redis = await startLocalRedis(mkdtempSync(join(tmpdir(), 'npu-fleet-supervised-redis-')));
    const fleet = spawnFleet(1, { NPU_FLEET_SIM_PROFILE: 'base=20000ms' }, { redisUrl: redis.url, drainTimeoutMs: 2_000 });
    const producer = new BullmqProducer(bullmqSettings({ redisUrl: redis.url, prefix: fleet.prefix }));
    const admin = new Redis(redis.url);
    try {
      expect(await until(() => fleet.lines('worker ready').length === 1, 30_000), fleet.output()).toBe(true);
      const input = { name: 'input', dtype: 'float32' as const, shape: [1, 64], data: new Uint8Array(64 * 4) };
      await producer.publish([makeRequest('mlp-classifier', 'frozen', 0, { replyTo: uniqueName('frozen-replies'), inputs: [input] })]);
      await new Promise((r) => setTimeout(r, 1000)); // the batch is on the device
      await producer.close();
      await admin.call('CLIENT', 'PAUSE', '30000', 'ALL');
      fleet.child.kill('SIGTERM');
      const result = await Promise.race([fleet.exited, new Promise<'slow'>((r) => setTimeout(() => r('slow'), 30_000))]);
      expect(result, fleet.output()).toEqual({ code: 1, signal: null });
      // It used to be SIGKILLed 5 s past the drain timeout while its exit waited for the device (NPU_FLEET_EXIT_GRACE_MS).
      expect(fleet.lines('worker did not drain in time; killing it'), fleet.output()).toHaveLength(0);
      expect(fleet.lines('worker did not stop cleanly')[0], fleet.output()).toMatchObject({ code: 71, signal: null });
    } finally {
      try {
        process.kill(-(fleet.child.pid as number), 'SIGKILL');
      } catch {
        // already gone
      }
      // Not CLIENT UNPAUSE: the pause holds it too. This Redis is the test's own: stopped, paused or not.
      admin.disconnect();
      await redis.stop();
    }
  }, 90_000);

  it('a worker draining when its supervisor dies finishes the drain (it used to SIGTERM itself, which killed the drain)', async () => {
    // Batches of 3 s: the drain is still running when the worker notices its supervisor is gone.
    const fleet = spawnFleet(1, { NPU_FLEET_SIM_PROFILE: 'base=3000ms' });
    const producer = new BullmqProducer(bullmqSettings({ prefix: fleet.prefix }));
    const replyTo = uniqueName('supervised-replies');
    const results = new Map<string, string>();
    let workerPid: number | undefined;
    try {
      expect(await until(() => fleet.lines('worker ready').length === 1, 30_000), fleet.output()).toBe(true);
      workerPid = fleet.lines('worker started')[0]?.workerPid as number;
      await producer.subscribeReplies(replyTo, (r) => results.set(r.id, r.status));
      const input = { name: 'input', dtype: 'float32' as const, shape: [1, 64], data: new Uint8Array(64 * 4) };
      await producer.publish(Array.from({ length: 4 }, (_, i) => makeRequest('mlp-classifier', `d${i}`, 0, { replyTo, inputs: [input] })));
      await new Promise((r) => setTimeout(r, 1000)); // the batch is on the device
      expect(results.size, 'answered before the drain: the batch was not slow').toBe(0);
      fleet.child.kill('SIGTERM'); // the supervisor forwards it: the worker drains
      expect(await until(() => fleet.lines('draining').length > 0, 5_000), fleet.output()).toBe(true);
      fleet.child.kill('SIGKILL'); // and dies before the drain is done
      const pid = workerPid;
      expect(await until(() => !alive(pid), 30_000), `worker ${pid} still running\n${fleet.output()}`).toBe(true);
      expect(fleet.output()).toContain('supervisor is gone');
      expect(fleet.lines('drained'), fleet.output()).toHaveLength(1);
      expect(await until(() => results.size === 4, 10_000), fleet.output()).toBe(true);
      expect([...results.values()]).toEqual(['ok', 'ok', 'ok', 'ok']);
    } finally {
      if (workerPid !== undefined && alive(workerPid)) process.kill(workerPid, 'SIGKILL');
      await producer.close();
    }
  }, 90_000);
});
