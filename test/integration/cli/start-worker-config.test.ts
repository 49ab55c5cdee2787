import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { alive } from '../../helpers/until.ts';
import { spawnCli } from '../../helpers/spawn-cli.ts';

/** A BullMQ fleet config (the simulator: 2 devices), `devices` as given. */
function writeConfig(file: string, prefix: string, devices: Record<string, unknown>): void {
  writeFileSync(
    file,
    stringify({
      transport: { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix } },
      devices: { backend: 'sim', ...devices },
      models: ['mlp-classifier'],
      worker: { metricsPort: 0 },
      log: { level: 'info' },
    }),
  );
}

/** `npu-fleet start --config FILE ...args` in its own process group, as a shell runs it. */
function spawnFleet(devices: Record<string, unknown>, args: string[], env: Record<string, string> = {}) {
  const configFile = join(tempDir('npu-fleet-worker-config-'), 'fleet.yaml');
  const prefix = uniqueName('worker-config');
  writeConfig(configFile, prefix, devices);
  // Short backoffs: a restart loop shows within the test's wait.
  const backoff = { NPU_FLEET__SUPERVISOR__RESTART_BACKOFF_MIN_MS: '100', NPU_FLEET__SUPERVISOR__RESTART_BACKOFF_MAX_MS: '400' };
  const { child, exited, output, lines } = spawnCli(['start', '--config', configFile, ...args], { NPU_FLEET_DEVICE: 'sim', ...backoff, ...env }, { detached: true });
  const killGroup = (): void => {
    try {
      process.kill(-(child.pid as number), 'SIGKILL');
    } catch {
      // already gone
    }
  };
  return { child, exited, output, lines, configFile, prefix, killGroup };
}

async function until(cond: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!cond() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  return cond();
}

describe('npu-fleet start: its workers run the config it checked', () => {
  // The supervisor took --devices over the bad value; each worker, reading the file and the env
  // without the flag, exited 2 and was restarted for good.
  for (const [what, devices, env] of [
    ['NPU_FLEET__DEVICES__COUNT=abc', {}, { NPU_FLEET__DEVICES__COUNT: 'abc' }],
    ['NPU_FLEET__DEVICES__COUNT=65', {}, { NPU_FLEET__DEVICES__COUNT: '65' }],
    ['devices.count: abc in the file', { count: 'abc' }, {}],
  ] as const) {
    it(`--devices 1 wins over ${what} in the workers too: the worker gets ready, is never restarted, and the fleet drains on SIGTERM (exit 0)`, async () => {
      const fleet = spawnFleet(devices, ['--devices', '1'], env);
      try {
        expect(await until(() => fleet.lines('worker ready').length === 1 || fleet.lines('worker exited; restarting').length > 0, 60_000), fleet.output()).toBe(true);
        expect(fleet.lines('worker exited; restarting'), fleet.output()).toHaveLength(0);
        expect(fleet.lines('worker started')).toHaveLength(1);
        fleet.child.kill('SIGTERM');
        expect(await fleet.exited, fleet.output()).toEqual({ code: 0, signal: null });
        expect(fleet.output()).not.toContain('invalid fleet config');
      } finally {
        fleet.killGroup();
      }
    }, 90_000);
  }
});

describe('npu-fleet start: workers that keep exiting 2 stop the fleet once no device serves', () => {
  it('the config file edited to an invalid one while running: a restarted worker exiting 2 is restarted on while the other serves; once both do, the fleet exits 2 naming the error', async () => {
    const fleet = spawnFleet({ count: 2 }, []);
    try {
      expect(await until(() => fleet.lines('worker ready').length === 2, 60_000), fleet.output()).toBe(true);
      const pid0 = fleet.lines('worker started').find((l) => l.device === 0)?.workerPid as number;
      const pid1 = fleet.lines('worker started').find((l) => l.device === 1)?.workerPid as number;
      // A hot edit: the running fleet is unaffected until a worker starts again and reads the file.
      writeConfig(fleet.configFile, fleet.prefix, { count: 'abc' });
      process.kill(pid0, 'SIGKILL');
      const exits2 = (device: number): number => fleet.lines('worker exited; restarting').filter((l) => l.device === device && l.code === 2).length;
      // Past the third exit 2 (the old give-up point) device 0 is still restarted: device 1 serves.
      expect(await until(() => exits2(0) >= 4, 60_000), fleet.output()).toBe(true);
      expect(fleet.output()).toMatch(/3 times in a row, each before it was ready; not every device's worker has \(the others may serve\), so it is restarted on/);
      expect(alive(pid1), 'the serving device is left serving').toBe(true);
      expect(fleet.output()).not.toContain('fleet stopped');

      // The last serving worker goes too: now no device can serve as configured.
      process.kill(pid1, 'SIGKILL');
      const result = await Promise.race([fleet.exited, new Promise<'still running'>((r) => setTimeout(() => r('still running'), 60_000))]);
      expect(result, fleet.output()).toEqual({ code: 2, signal: null });
      expect(exits2(1), fleet.output()).toBe(2);
      expect(fleet.output()).toMatch(/npu-fleet: the workers of every device exit 2 at start-up, every time \(device 1 last\): fleet stopped: invalid fleet config \S+fleet\.yaml: devices\.count/);
    } finally {
      fleet.killGroup();
    }
  }, 150_000);
});
