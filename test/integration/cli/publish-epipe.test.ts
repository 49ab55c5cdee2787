// `npu-fleet publish --await | head -1` against a real, slow worker on real Redis (BullMQ): when the
// reader of the result lines goes away, publish is interrupted as by Ctrl-C (stops, removes its
// private inbox, says how far it got on stderr, exits 130) instead of crashing on EPIPE or reading
// the remaining results into a closed pipe and exiting 0 as if they had been delivered. Own file:
// the simulator reads its time model from the environment when it initialises.
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { startBullmqSimWorker } from '../../helpers/bullmq-sim-worker.ts';
import { getServices } from '../../helpers/services.ts';
import { spawnCliHead } from '../../helpers/spawn-cli-head.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';
// 400 ms a batch: --in-flight 2 answers 2 requests at a time, so 40 take some 8 s.
process.env['NPU_FLEET_SIM_PROFILE'] = 'base=400ms,perItem=0ms';
const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

describe('npu-fleet publish --await with stdout closed by its reader', () => {
  it('is interrupted as by Ctrl-C: exit 130, its inbox removed, no EPIPE stack', { timeout: 120_000 }, async () => {
    const { configFile, worker, settings } = await startBullmqSimWorker('pubepipe');
    const { prefix } = settings.transport.bullmq;
    cleanup.push(() => worker.stop());
    const redis = new Redis(getServices().redisUrl);
    cleanup.push(async () => redis.disconnect());

    const startedAt = Date.now();
    // Like `head -1`: one result line, then the pipe's only read end is closed.
    const run = spawnCliHead(['publish', '--config', configFile, '--model', 'mlp-classifier', '--count', '40', '--in-flight', '2', '--await'], 1, { NPU_FLEET_DEVICE: 'sim' });
    cleanup.push(async () => void run.child.kill('SIGKILL'));
    const result = await Promise.race([run.exited, new Promise<'no exit'>((r) => setTimeout(() => r('no exit'), 60_000))]);
    const lines = run.stdout();
    const stderr = run.stderr();
    const tookMs = Date.now() - startedAt;
    expect(JSON.parse(lines.split('\n')[0] ?? '') as unknown).toMatchObject({ status: 'ok' });
    expect(stderr).not.toMatch(/Unhandled|EPIPE\n|at .*\.ts:\d+/);
    expect(result, `${stderr} after ${tookMs} ms`).toEqual({ code: 130, signal: null });
    expect(stderr).toMatch(/interrupted by stdout closing \(EPIPE\) after \d+ of \d+ result\(s\); the others were published and may still be served/);
    expect(await redis.keys(`${prefix}:*inbox*`)).toEqual([]);
  });
});
