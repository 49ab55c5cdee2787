// `npu-fleet dlq list|replay|purge` on BullMQ whose redis-server froze (SIGSTOP: a hung host, a
// paused VM; the connection stays open and nothing answers) or went down after the command had
// reached it: the command must fail within about transport.bullmq.connectTimeoutMs with an error
// naming that setting, as the producer does (0d8f55c), not wait for good; and a replay stopped so
// loses no record (each is re-sent or still in the DLQ). Own redis-server per case (freezing the
// shared one would stall every other test file).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { stringify } from 'yaml';
import { dlqCommand } from '../../../src/cli/dlq-command.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { BullmqDeadLetters } from '../../../src/transport/bullmq/bullmq-dead-letters.ts';
import { startKillableRedis, type KillableRedis } from '../../helpers/killable-redis.ts';
import { uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { bullmqSettings, queueJobs } from './bullmq-harness.ts';

const cleanup: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await Promise.resolve(c()).catch(() => undefined);
});

const CONNECT_TIMEOUT_MS = 2_000;
/** connectTimeoutMs, then room for a loaded machine. */
const WITHIN_MS = CONNECT_TIMEOUT_MS + 4_000;

/** A DLQ record as answer-jobs.ts writes it. */
const record = (model: string, id: string): Record<string, unknown> => ({
  reason: 'UNKNOWN_MODEL',
  message: 'not served',
  source: { queue: `${model}.requests`, jobId: id },
  priority: 1,
  original: { id, model, createdAt: 1, inputs: [] },
});

/** An own redis-server with `n` DLQ records of a fresh model. */
async function redisWithDlq(n: number): Promise<{ redis: KillableRedis; settings: ReturnType<typeof bullmqSettings>; model: string; dir: string }> {
  const dir = tempDir('npu-fleet-dlq-frozen-');
  const redis = await startKillableRedis(dir);
  cleanup.push(() => redis.stop());
  cleanup.push(() => {
    try {
      redis.thaw();
    } catch {
      // Already gone (killed): nothing to thaw.
    }
  });
  const settings = bullmqSettings({ redisUrl: redis.url, connectTimeoutMs: CONNECT_TIMEOUT_MS });
  const model = uniqueName('dlqfrozen').replace(/[^A-Za-z0-9-]/g, '');
  const dlq = new Queue(`${model}.dlq`, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
  try {
    await dlq.addBulk(Array.from({ length: n }, (_, i) => ({ name: 'dead-letter', data: record(model, `r${i}`) })));
  } finally {
    await dlq.close();
  }
  return { redis, settings, model, dir };
}

/** How the call settled, or 'still waiting' after `ms`. */
async function settledWithin(work: Promise<unknown>, ms: number): Promise<{ outcome: unknown; tookMs: number }> {
  const from = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    work.then(
      () => 'succeeded',
      (e: unknown) => e,
    ),
    new Promise<string>((r) => (timer = setTimeout(() => r('still waiting'), ms))),
  ]);
  clearTimeout(timer);
  return { outcome, tookMs: Date.now() - from };
}

/** Frozen: the wait to raise (connectTimeoutMs); down: the address to check (redisUrl). */
function expectNamesTheSetting(outcome: unknown, setting = /transport\.bullmq\.connectTimeoutMs/): FleetError {
  expect(outcome).toBeInstanceOf(FleetError);
  const err = outcome as FleetError;
  expect({ code: err.code, retriable: err.retriable }).toEqual({ code: 'TRANSPORT_ERROR', retriable: true });
  expect(err.message).toMatch(setting);
  return err;
}

describe('bullmq DLQ commands with Redis frozen (SIGSTOP) or down after they reached it', () => {
  it('list fails within about connectTimeoutMs naming the setting, and close() ends too', async () => {
    const { redis, settings, model } = await redisWithDlq(3);
    const dl = new BullmqDeadLetters(settings);
    cleanup.push(() => dl.close());
    expect((await dl.list({ model })).scanned).toBe(3);

    redis.freeze();
    const { outcome, tookMs } = await settledWithin(dl.list({ model }), WITHIN_MS + 6_000);
    const err = expectNamesTheSetting(outcome);
    expect(err.message).toMatch(/did not answer within 2000 ms/);
    expect(tookMs).toBeLessThan(WITHIN_MS);
    const closed = await settledWithin(dl.close(), WITHIN_MS);
    expect(closed.outcome).toBe('succeeded');
  }, 40_000);

  it('a replay frozen part way fails within about connectTimeoutMs; once Redis is back every record is re-sent or still in the DLQ', async () => {
    const n = 60;
    const { redis, settings, model } = await redisWithDlq(n);
    const dl = new BullmqDeadLetters(settings);
    cleanup.push(() => dl.close());
    let frozen = false;
    const replay = dl.replay({
      model,
      progressEvery: 10,
      onProgress: ({ replayed }) => {
        if (!frozen && replayed >= 10) {
          frozen = true;
          redis.freeze();
        }
      },
    });
    const { outcome, tookMs } = await settledWithin(replay, WITHIN_MS + 30_000);
    expect(frozen).toBe(true);
    const err = expectNamesTheSetting(outcome);
    expect(err.message).toMatch(/record\(s\) were re-sent before it/);
    expect(tookMs).toBeLessThan(WITHIN_MS + 10_000);

    redis.thaw();
    const sent = (await queueJobs(settings, `${model}.requests`, ['wait', 'prioritized'])).map((j) => j.id);
    const after = new BullmqDeadLetters(settings);
    cleanup.push(() => after.close());
    const left = (await after.list({ model, limit: n })).letters.map((x) => x.requestId);
    // Measured: 10 re-sent before the freeze (the others wait in the DLQ).
    expect(sent.length).toBeGreaterThanOrEqual(10);
    const all = new Set([...sent, ...left]);
    expect(all.size).toBe(n);
  }, 60_000);

  it('purge --expired frozen before its first read fails within about connectTimeoutMs', async () => {
    const { redis, settings, model } = await redisWithDlq(3);
    const dl = new BullmqDeadLetters(settings);
    cleanup.push(() => dl.close());
    await dl.list({ model });
    redis.freeze();
    const { outcome, tookMs } = await settledWithin(dl.purge({ model, expired: true }), WITHIN_MS + 6_000);
    expectNamesTheSetting(outcome);
    expect(tookMs).toBeLessThan(WITHIN_MS);
  }, 40_000);

  it('list with Redis SIGKILLed after it was reached fails within about connectTimeoutMs naming the setting', async () => {
    const { redis, settings, model } = await redisWithDlq(3);
    const dl = new BullmqDeadLetters(settings);
    cleanup.push(() => dl.close());
    await dl.list({ model });
    redis.kill();
    const { outcome, tookMs } = await settledWithin(dl.list({ model }), WITHIN_MS + 6_000);
    expectNamesTheSetting(outcome, /transport\.bullmq\.redisUrl/);
    expect(tookMs).toBeLessThan(WITHIN_MS);
  }, 40_000);

  it('a replay whose Redis goes down part way reports it once, in its error, with no connection errors dumped on stderr', async () => {
    // Each BullMQ Queue the replay opened had no 'error' listener, so BullMQ console.error'ed every
    // failed reconnect of the shared connection: 21 stack traces of ECONNREFUSED above the one
    // line that said what happened (QA, a 10,000-record replay through a proxy that was stopped).
    const { redis, settings, model } = await redisWithDlq(60);
    const printed = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    cleanup.push(() => printed.mockRestore());
    const dl = new BullmqDeadLetters(settings);
    cleanup.push(() => dl.close());
    let killed = false;
    const replay = dl.replay({
      model,
      progressEvery: 10,
      onProgress: ({ replayed }) => {
        if (!killed && replayed >= 10) {
          killed = true;
          redis.kill();
        }
      },
    });
    const { outcome } = await settledWithin(replay, WITHIN_MS + 30_000);
    expect(killed).toBe(true);
    expectNamesTheSetting(outcome, /transport\.bullmq\.redisUrl/);
    await dl.close();
    expect(printed.mock.calls.map((c) => String(c[0]))).toEqual([]);
  }, 60_000);

  for (const how of ['frozen', 'down'] as const) {
    it(`npu-fleet dlq list|replay|purge with Redis ${how} from the start fail within about connectTimeoutMs naming the setting`, async () => {
      const { redis, settings, model, dir } = await redisWithDlq(1);
      const configFile = join(dir, 'fleet.yaml');
      writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl: redis.url, prefix: settings.prefix, connectTimeoutMs: CONNECT_TIMEOUT_MS } }, models: [model] }));
      if (how === 'frozen') redis.freeze();
      else redis.kill();
      for (const sub of [['list'], ['replay'], ['purge', '--expired']]) {
        const { outcome, tookMs } = await settledWithin(dlqCommand([...sub, '--config', configFile, '--model', model], () => undefined), WITHIN_MS + 6_000);
        expectNamesTheSetting(outcome, how === 'frozen' ? /did not answer within 2000 ms.*transport\.bullmq\.connectTimeoutMs/ : /transport\.bullmq\.redisUrl/);
        expect(tookMs, sub[0]).toBeLessThan(WITHIN_MS);
      }
    }, 60_000);
  }
});
