// A worker whose redis-server freezes (SIGSTOP: a hung host, a paused VM; connections stay open,
// nothing answers, and Redis's clock runs on, so locks lapse the moment it resumes) while it holds
// jobs, then resumes. The e2e broker-outage drill pauses Redis with CLIENT PAUSE (Redis keeps
// running and answers its own timers) and asserts no duplicate bound; here the process itself
// stops: longer than transport.bullmq.lockDurationMs, nothing is lost, the worker keeps serving and
// the duplicates are counted and bounded; shorter than the lock, there are none. Own redis-server
// per case (freezing the shared one would stall every other test file).
import { afterEach, describe, expect, it } from 'vitest';
import type { FleetError } from '../../../src/errors/fleet-error.ts';
import { startKillableRedis } from '../../helpers/killable-redis.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { uniqueName } from '../../helpers/unique-name.ts';
import { bullmqSettings } from './bullmq-harness.ts';
import { requestAll, startBatchingWorker } from './batching-worker.ts';
import { makeRequest } from './conformance-kit.ts';

const cleanup: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await Promise.resolve(c()).catch(() => undefined);
});

const N = 300;
const DEVICE_MS = 100;
const BATCH = 8;
const PREFETCH = 16;
const LOCK_MS = 3_000;

async function until(what: string, probe: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function drill(freezeMs: number) {
  const redis = await startKillableRedis(tempDir('npu-fleet-bullmq-frozen-worker-'));
  cleanup.push(() => redis.stop());
  cleanup.push(() => {
    try {
      redis.thaw();
    } catch {
      // Gone already.
    }
  });
  const s = bullmqSettings({ redisUrl: redis.url, lockDurationMs: LOCK_MS, prefetch: PREFETCH, connectTimeoutMs: 5_000 });
  const model = uniqueName('frozenwk');
  const fatal: FleetError[] = [];
  const { device, producer } = await startBatchingWorker(s, { model, batch: BATCH, deviceMs: DEVICE_MS, cleanup, onFatal: (err) => void fatal.push(err) });
  const served = device.served;
  // All sent before the freeze (a publish to a frozen Redis fails by design, 0d8f55c): this drill is the worker's.
  const answers = requestAll(producer, model, N, 120_000);
  await until('the worker is part way', () => served.size >= N / 4, 60_000);
  const atFreeze = served.size;
  redis.freeze();
  await new Promise((r) => setTimeout(r, freezeMs));
  redis.thaw();
  const thawedAt = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const outcomes = await Promise.race([answers, new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), 90_000)))]);
  clearTimeout(timer);
  const duplicates = [...served.values()].reduce((n, c) => n + c - 1, 0);
  const report = `freeze ${freezeMs} ms (lock ${LOCK_MS}): ${atFreeze} served at the freeze; ${outcomes === undefined ? 'not all answered within 90 s' : `${outcomes.filter((o) => o === 'ok').length} of ${N} ok`} ` +
    `${Date.now() - thawedAt} ms after the thaw; duplicates ${duplicates}; fatal ${fatal.length}`;
  console.log(`[frozen-worker] ${report}`);
  expect(outcomes, report).toBeDefined();
  expect(outcomes?.filter((o) => o !== 'ok'), report).toEqual([]);
  expect(fatal, report).toEqual([]);
  // The same worker serves the next request.
  expect((await producer.request(makeRequest(model, 'after', 0), { timeoutMs: 30_000 })).status, report).toBe('ok');
  return { duplicates, report };
}

describe('bullmq worker with its redis-server frozen (SIGSTOP) while it holds jobs', () => {
  it('frozen for three lock durations, then resumed: every request answered, worker serving, duplicates at most what it held', async () => {
    const { duplicates, report } = await drill(3 * LOCK_MS);
    // Jobs whose lock lapsed in the freeze may run twice: those held then (prefetch) and the batch on the device.
    expect(duplicates, report).toBeLessThanOrEqual(PREFETCH + BATCH);
  }, 180_000);

  it('frozen for a third of the lock, then resumed: every request answered, no duplicate', async () => {
    const { duplicates, report } = await drill(LOCK_MS / 3);
    expect(duplicates, report).toBe(0);
  }, 180_000);
});
