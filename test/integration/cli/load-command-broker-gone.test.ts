// `npu-fleet load` on BullMQ whose redis-server was SIGKILLed mid-run: a SIGTERM must still end it
// within --drain-ms plus a bounded close, with a summary line and a non-zero exit (nothing was
// answered). A CI job or a k8s Job has no one to kill -9 it. Own redis-server (killing the shared
// one would break every other test file), no worker: no reply is expected either way.
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { startKillableRedis } from '../../helpers/killable-redis.ts';
import { spawnCli } from '../../helpers/spawn-cli.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { uniqueName } from '../../helpers/unique-name.ts';
import { until } from '../../helpers/until.ts';

const cleanup: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

const DRAIN_MS = 2_000;
/** Drain, then a close bounded at a few seconds, on a loaded machine. */
const EXIT_WITHIN_MS = DRAIN_MS + 10_000;

/**
 * A load on BullMQ with transport.bullmq.connectTimeoutMs left at its default (15 s): a few requests
 * out, then its redis-server SIGKILLed. Returns the running child.
 */
async function loadWithRedisKilled(how: 'kill' | 'freeze' = 'kill', bullmq: Record<string, unknown> = {}): Promise<ReturnType<typeof spawnCli>> {
  const dir = tempDir('npu-fleet-loadgone-');
  const redis = await startKillableRedis(dir);
  cleanup.push(() => redis.stop());
  const configFile = join(dir, 'fleet.yaml');
  writeFileSync(
    configFile,
    stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl: redis.url, prefix: uniqueName('loadgone'), ...bullmq } }, modelRepository: 'examples/models', log: { level: 'warn' } }),
  );
  const run = spawnCli(['load', '--config', configFile, '--model', 'mlp-classifier', '--rate', '20', '--drain-ms', String(DRAIN_MS), '--deadline-ms', '5000'], { NPU_FLEET_DEVICE: 'sim' });
  cleanup.push(() => void run.child.kill('SIGKILL'));
  await until(() => /sent [1-9]\d*\/s/.test(run.output()), 30_000, 'a progress line with requests sent');
  if (how === 'kill') redis.kill();
  else redis.freeze();
  // Requests sent into the dead connection too, as a real outage would have them.
  await new Promise((r) => setTimeout(r, 1_000));
  return run;
}

async function exitWithin(run: ReturnType<typeof spawnCli>, ms: number): Promise<{ result: unknown; tookMs: number }> {
  const from = Date.now();
  const result = await Promise.race([run.exited, new Promise<'no exit'>((r) => setTimeout(() => r('no exit'), ms))]);
  return { result, tookMs: Date.now() - from };
}

describe('npu-fleet load with its Redis killed', () => {
  it('stops on SIGTERM within --drain-ms plus a bounded close, prints the summary, exits 1', { timeout: 90_000 }, async () => {
    const run = await loadWithRedisKilled();
    run.child.kill('SIGTERM');
    const { result, tookMs } = await exitWithin(run, EXIT_WITHIN_MS);
    const out = run.output();
    expect(result, `${tookMs} ms after SIGTERM:\n${out.slice(-3000)}`).toEqual({ code: 1, signal: null });
    expect(out).toMatch(/stopped by SIGTERM: sent \d+, \d+ without a reply after --drain-ms/);
    expect(out).toMatch(/no request was answered/);
    // The producer's close is bounded by itself (a connection that is not up is not waited for): the CLI's 5 s bound is not reached.
    expect(out).not.toMatch(/closing the bullmq producer did not finish/);
  });

  it('says why sends failed: the first error of a request that failed without a reply is on stderr, not only its code in the summary', { timeout: 90_000 }, async () => {
    // connectTimeoutMs 1000: each publish into the dead connection fails after 1 s, TRANSPORT_ERROR.
    const run = await loadWithRedisKilled('kill', { connectTimeoutMs: 1_000 });
    await until(() => /error TRANSPORT_ERROR/.test(run.output()), 20_000, 'a send error counted');
    run.child.kill('SIGTERM');
    const { result } = await exitWithin(run, EXIT_WITHIN_MS);
    const out = run.output();
    expect(result, out.slice(-3000)).toEqual({ code: 1, signal: null });
    expect(out).toMatch(/npu-fleet: \d+ request\(s\) failed without a reply; the first: TRANSPORT_ERROR: .*did not answer within 1000 ms/);
  });

  it('a second SIGTERM while the producer closes ends it at once', { timeout: 90_000 }, async () => {
    // Frozen, not killed: the connections stay up, so the producer's close waits for Redis (up to connectTimeoutMs).
    const run = await loadWithRedisKilled('freeze');
    run.child.kill('SIGTERM');
    // The summary is printed before the close begins.
    await until(() => /stopped by SIGTERM/.test(run.output()), DRAIN_MS + 10_000, 'the summary line');
    await new Promise((r) => setTimeout(r, 500));
    run.child.kill('SIGTERM');
    const { result, tookMs } = await exitWithin(run, 4_000);
    const out = run.output();
    expect(result, `${tookMs} ms after the second SIGTERM:\n${out.slice(-3000)}`).toEqual({ code: 1, signal: null });
    expect(out).toMatch(/closing the bullmq producer did not finish \(is the broker reachable\?\): abandoned on SIGTERM/);
  });
});
