// The warnings a producer logs reach the user of `npu-fleet publish` and `npu-fleet load`: on
// stderr, so stdout (result lines, progress lines) stays machine-readable. The one a user most
// needs: a private inbox queue left on Redis when the producer closes with Redis gone (it has to be
// removed by hand). Own redis-server (killing the shared one would break every other test file),
// no worker: no reply is expected.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { startKillableRedis, type KillableRedis } from '../../helpers/killable-redis.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { uniqueName } from '../../helpers/unique-name.ts';
import { until } from '../../helpers/until.ts';

const cleanup: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

/** `npu-fleet ARGS` with stdout and stderr kept apart. */
function spawnCliApart(args: readonly string[]) {
  const child = spawn(process.execPath, ['bin/npu-fleet.js', ...args], { env: { ...process.env, NPU_FLEET_DEVICE: 'sim' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  cleanup.push(() => void child.kill('SIGKILL'));
  return { child, exited, stdout: (): string => stdout, stderr: (): string => stderr };
}

async function bullmqConfig(name: string): Promise<{ redis: KillableRedis; configFile: string }> {
  const dir = tempDir(`npu-fleet-${name}-`);
  const redis = await startKillableRedis(dir);
  cleanup.push(() => redis.stop());
  const configFile = join(dir, 'fleet.yaml');
  writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl: redis.url, prefix: uniqueName(name) } }, models: ['mlp-classifier'], modelRepository: 'examples/models' }));
  return { redis, configFile };
}

/** Until the private inbox's reply worker is on Redis: its queue keys exist. */
async function inboxOpened(url: string, what: () => string): Promise<void> {
  const admin = new Redis(url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
  admin.on('error', () => undefined);
  try {
    const deadline = Date.now() + 30_000;
    while ((await admin.keys('*.inbox.*')).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(await admin.keys('*.inbox.*'), what()).not.toEqual([]);
  } finally {
    admin.disconnect();
  }
}

describe('producer warnings of the client commands go to stderr', () => {
  it('publish --await: the inbox queue left on a killed Redis is named on stderr; stdout holds no log line', { timeout: 90_000 }, async () => {
    const { redis, configFile } = await bullmqConfig('pubwarn');
    const run = spawnCliApart(['publish', '--config', configFile, '--model', 'mlp-classifier', '--count', '2', '--await', '--timeout-ms', '60000']);
    await inboxOpened(redis.url, () => run.stderr());
    await new Promise((r) => setTimeout(r, 500));
    redis.kill();
    await new Promise((r) => setTimeout(r, 500));
    run.child.kill('SIGTERM');
    const result = await Promise.race([run.exited, new Promise<'no exit'>((r) => setTimeout(() => r('no exit'), 15_000))]);
    expect(result, run.stderr()).toEqual({ code: 130, signal: null });
    // Before: the producer had no logger, so nothing said the inbox queue was left behind.
    expect(run.stderr()).toMatch(/left the inbox queue producer\.inbox\.[\w-]+ on Redis at 127\.0\.0\.1:\d+ .*obliterate/);
    expect(run.stdout()).not.toMatch(/"level"|left the inbox queue/);
  });

  it('load: the inbox queue left on a killed Redis is named on stderr; the progress lines on stdout hold no log line', { timeout: 90_000 }, async () => {
    const { redis, configFile } = await bullmqConfig('loadwarn');
    const run = spawnCliApart(['load', '--config', configFile, '--model', 'mlp-classifier', '--rate', '20', '--drain-ms', '1000']);
    await until(() => /sent [1-9]\d*\/s/.test(run.stdout()), 30_000, 'a progress line with requests sent');
    redis.kill();
    await new Promise((r) => setTimeout(r, 500));
    run.child.kill('SIGTERM');
    const result = await Promise.race([run.exited, new Promise<'no exit'>((r) => setTimeout(() => r('no exit'), 20_000))]);
    expect(result, run.stderr()).not.toBe('no exit');
    expect(run.stderr()).toMatch(/left the inbox queue producer\.inbox\.[\w-]+ on Redis at 127\.0\.0\.1:\d+ .*obliterate/);
    expect(run.stdout()).not.toMatch(/"level"|left the inbox queue/);
    expect(run.stdout()).toMatch(/stopped by SIGTERM: sent \d+/);
  });
});
