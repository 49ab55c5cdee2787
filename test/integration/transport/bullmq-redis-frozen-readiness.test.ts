// A worker's readiness while its redis-server is frozen (SIGSTOP: a hung host, a paused VM). The
// connections stay open, so the client sees no close: readiness stayed 200 for the whole freeze
// (52 s observed), while a real disconnect turned it 503 "broker unreachable" at once. Own
// redis-server (freezing the shared one would stall every other test file).
import { afterEach, describe, expect, it } from 'vitest';
import { workerReadiness } from '../../../src/runtime/worker-health.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { startKillableRedis } from '../../helpers/killable-redis.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { uniqueName } from '../../helpers/unique-name.ts';
import { bullmqSettings } from './bullmq-harness.ts';
import { Inbox, startWith } from './conformance-kit.ts';

const cleanup: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await Promise.resolve(c()).catch(() => undefined);
});

async function until(what: string, probe: () => boolean, timeoutMs: number): Promise<number> {
  const startedAt = Date.now();
  while (!probe()) {
    if (Date.now() - startedAt > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return Date.now() - startedAt;
}

describe('bullmq worker readiness with its redis-server frozen (SIGSTOP)', () => {
  it('turns unready within the bound, saying Redis does not answer, and ready again once it answers', async () => {
    const redis = await startKillableRedis(tempDir('npu-fleet-bullmq-frozen-ready-'));
    cleanup.push(() => redis.stop());
    cleanup.push(() => {
      try {
        redis.thaw();
      } catch {
        // Gone already.
      }
    });
    // connectTimeoutMs 2 s: the bound of an unanswered command is at most it.
    const transport = new BullmqTransport(bullmqSettings({ redisUrl: redis.url, connectTimeoutMs: 2_000 }));
    cleanup.push(() => transport.abort());
    await startWith(transport, uniqueName('frozenready'), new Inbox());
    const readiness = () =>
      workerReadiness({
        state: 'running',
        brokerConnected: transport.connected(),
        brokerUnreadyReason: transport.connected() ? undefined : transport.unreadyReason?.(),
        failing: undefined,
        hangLimitMs: 30_000,
      });
    expect(readiness()).toEqual({ ready: true });
    // Not unready on a Redis that answers, however long it runs.
    await new Promise((r) => setTimeout(r, 3_000));
    expect(readiness()).toEqual({ ready: true });

    redis.freeze();
    const unreadyAfterMs = await until('unready while frozen', () => !readiness().ready, 8_000);
    expect(unreadyAfterMs).toBeLessThan(4_000);
    const unready = readiness();
    expect(unready.ready).toBe(false);
    expect(!unready.ready && unready.reason).toMatch(/Redis has not answered for \d+ ms \(a command unanswered past 2000 ms: transport\.bullmq\.connectTimeoutMs/);

    redis.thaw();
    await until('ready again once Redis answers', () => readiness().ready, 5_000);
  }, 60_000);
});
