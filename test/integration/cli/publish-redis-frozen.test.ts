// `npu-fleet publish` (and `--await`) on BullMQ whose redis-server freezes (SIGSTOP: a hung host;
// the connections stay open and nothing answers) while requests are going out: the run must end by
// itself within about transport.bullmq.connectTimeoutMs, exit 1 and say which setting bounds the
// wait, not hang until someone kills it. Own redis-server (freezing the shared one would stall
// every other test file), no worker: no reply is expected.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
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

const CONNECT_TIMEOUT_MS = 3_000;
/** --await's --timeout-ms (5 s) to make room, connectTimeoutMs for the stuck add, then the bounded close, on a loaded machine. */
const EXIT_WITHIN_MS = 5_000 + CONNECT_TIMEOUT_MS + 13_000;

/** A publish run of many requests on its own redis-server, frozen once its first jobs are on Redis. */
async function publishThenFreeze(extra: readonly string[]): Promise<ReturnType<typeof spawnCli>> {
  const dir = tempDir('npu-fleet-pubfrozen-');
  const redis = await startKillableRedis(dir);
  cleanup.push(() => redis.stop());
  const configFile = join(dir, 'fleet.yaml');
  const prefix = uniqueName('pubfrozen');
  writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl: redis.url, prefix, connectTimeoutMs: CONNECT_TIMEOUT_MS } }, models: ['mlp-classifier'] }));
  // Enough chunks (200 requests each) that publishing is still going on when Redis freezes.
  const run = spawnCli(['publish', '--config', configFile, '--model', 'mlp-classifier', '--count', '300000', ...extra]);
  cleanup.push(() => void run.child.kill('SIGKILL'));
  const admin = new Redis(redis.url, { maxRetriesPerRequest: 0, retryStrategy: () => null, lazyConnect: true });
  admin.on('error', () => undefined);
  await admin.connect();
  try {
    const deadline = Date.now() + 30_000;
    // Any key: the first add has reached Redis.
    const jobs = (): Promise<number> => admin.dbsize();
    while ((await jobs()) === 0 && Date.now() < deadline && run.child.exitCode === null) await new Promise((r) => setTimeout(r, 20));
    expect(await jobs(), run.output()).toBeGreaterThan(0);
  } finally {
    admin.disconnect();
  }
  redis.freeze();
  return run;
}

async function exitWithin(run: ReturnType<typeof spawnCli>, ms: number): Promise<{ result: unknown; tookMs: number }> {
  const from = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const result = await Promise.race([run.exited, new Promise<'no exit'>((r) => (timer = setTimeout(() => r('no exit'), ms)))]);
  clearTimeout(timer);
  return { result, tookMs: Date.now() - from };
}

describe('npu-fleet publish with its Redis frozen (SIGSTOP) mid-run', () => {
  it('publish: exits 1 within about connectTimeoutMs, naming transport.bullmq.connectTimeoutMs', { timeout: 90_000 }, async () => {
    const run = await publishThenFreeze([]);
    const { result, tookMs } = await exitWithin(run, EXIT_WITHIN_MS);
    const out = run.output();
    // Before the fix: 'no exit' (the add in flight waited for Redis for good).
    expect(result, `${tookMs} ms after the freeze:\n${out.slice(-3000)}`).toEqual({ code: 1, signal: null });
    expect(out).toMatch(/Redis at 127\.0\.0\.1:\d+ did not answer within 3000 ms \(transport\.bullmq\.connectTimeoutMs\)/);
    expect(out).toMatch(/publishing stopped after \d+ of \d+ requests read were published/);
  });

  it('publish --await: exits 1 once an add finds Redis frozen, naming the setting, instead of publishing on into it', { timeout: 90_000 }, async () => {
    // Unanswered requests make room after --timeout-ms, so chunks keep going out after the freeze;
    // --timeout-ms over connectTimeoutMs, else each request times out before its stuck add fails.
    const run = await publishThenFreeze(['--await', '--in-flight', '1000', '--timeout-ms', '5000']);
    const { result, tookMs } = await exitWithin(run, EXIT_WITHIN_MS);
    const out = run.output();
    expect(result, `${tookMs} ms after the freeze:\n${out.slice(-3000)}`).toEqual({ code: 1, signal: null });
    expect(out).toMatch(/did not answer within 3000 ms \(transport\.bullmq\.connectTimeoutMs\)/);
  });
});
