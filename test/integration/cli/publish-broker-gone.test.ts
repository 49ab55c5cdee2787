// `npu-fleet publish --await` on BullMQ whose redis-server was SIGKILLed while it awaited replies:
// a SIGTERM must still end it within a few seconds (exit 130, saying how far it got), as it does
// with Redis up (publish-interrupt). Own redis-server, no worker: no reply comes either way.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { startKillableRedis } from '../../helpers/killable-redis.ts';
import { spawnCli } from '../../helpers/spawn-cli.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { uniqueName } from '../../helpers/unique-name.ts';

const cleanup: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

/** A close bounded at a few seconds, on a loaded machine (connectTimeoutMs is left at 15 s). */
const EXIT_WITHIN_MS = 10_000;

describe('npu-fleet publish --await with its Redis killed', () => {
  it('exits 130 on SIGTERM within a few seconds, naming how far it got', { timeout: 90_000 }, async () => {
    const dir = tempDir('npu-fleet-pubgone-');
    const redis = await startKillableRedis(dir);
    cleanup.push(() => redis.stop());
    const configFile = join(dir, 'fleet.yaml');
    writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl: redis.url, prefix: uniqueName('pubgone') } }, models: ['mlp-classifier'] }));
    const run = spawnCli(['publish', '--config', configFile, '--model', 'mlp-classifier', '--count', '2', '--await', '--timeout-ms', '60000']);
    cleanup.push(() => void run.child.kill('SIGKILL'));
    // Published and awaiting: the request jobs are on Redis (checked on the server itself).
    const { Redis } = await import('ioredis');
    const admin = new Redis(redis.url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
    admin.on('error', () => undefined);
    try {
      const deadline = Date.now() + 30_000;
      while ((await admin.keys('*mlp-classifier*')).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      expect(await admin.keys('*mlp-classifier*'), run.output()).not.toEqual([]);
    } finally {
      admin.disconnect();
    }
    await new Promise((r) => setTimeout(r, 500));
    redis.kill();
    await new Promise((r) => setTimeout(r, 1_000));
    const termAt = Date.now();
    run.child.kill('SIGTERM');
    const result = await Promise.race([run.exited, new Promise<'no exit'>((r) => setTimeout(() => r('no exit'), EXIT_WITHIN_MS))]);
    const out = run.output();
    expect(result, `${Date.now() - termAt} ms after SIGTERM:\n${out.slice(-3000)}`).toEqual({ code: 130, signal: null });
    expect(out).toMatch(/interrupted by SIGTERM after 0 of 2 result\(s\)/);
    // The producer's close is bounded by itself (a connection that is not up is not waited for): the CLI's 5 s bound is not reached.
    expect(out).not.toMatch(/closing the bullmq producer did not finish/);
  });
});
