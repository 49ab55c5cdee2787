// `npu-fleet load | head -1` against a real worker on real Redis (BullMQ): when stdout's reader goes
// away, load stops as on Ctrl-C (waits for the replies still out, exits 0) instead of crashing on
// EPIPE or sending on, unwatched, to the end of --seconds.
import { afterEach, describe, expect, it } from 'vitest';
import { startBullmqSimWorker } from '../../helpers/bullmq-sim-worker.ts';
import { spawnCliHead } from '../../helpers/spawn-cli-head.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';
const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

describe('npu-fleet load with stdout closed by its reader', () => {
  it('stops as on Ctrl-C and exits 0 long before --seconds, without an EPIPE stack', { timeout: 120_000 }, async () => {
    const { configFile, worker } = await startBullmqSimWorker('loadepipe');
    cleanup.push(() => worker.stop());

    const startedAt = Date.now();
    // Like `head -2`: the title and the first progress line (sent and answered), then the pipe's
    // only read end is closed; the next progress line a second later meets EPIPE.
    const run = spawnCliHead(['load', '--config', configFile, '--model', 'mlp-classifier', '--rate', '50', '--seconds', '60', '--deadline-ms', '5000'], 2, { NPU_FLEET_DEVICE: 'sim' });
    cleanup.push(async () => void run.child.kill('SIGKILL'));
    const result = await Promise.race([run.exited, new Promise<'no exit'>((r) => setTimeout(() => r('no exit'), 30_000))]);
    const lines = run.stdout();
    const stderr = run.stderr();
    expect(lines).toMatch(/^load: 50 req\/s of mlp-classifier for 60 s \(bullmq\)\n/);
    expect(stderr).not.toMatch(/Unhandled|EPIPE\n|at .*\.ts:\d+/);
    expect(result, `${stderr} after ${Date.now() - startedAt} ms`).toEqual({ code: 0, signal: null });
    expect(stderr).toMatch(/stdout closed \(EPIPE\): stopping the load as on Ctrl-C/);
  });
});
