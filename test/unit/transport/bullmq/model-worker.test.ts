// ModelWorker's log during a Redis outage: real connection errors, from ioredis clients pointed at
// a loopback port nothing listens on (no Redis needed, none mocked).
import type { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { BullmqSettingsSchema } from '../../../../src/contracts/fleet-config.ts';
import type { TransportLogger } from '../../../../src/transport/kafka/kafka-client.ts';
import { redisConnection } from '../../../../src/transport/bullmq/bullmq-names.ts';
import { ModelWorker } from '../../../../src/transport/bullmq/model-worker.ts';
import { freePort } from '../../../helpers/service-process.ts';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  await Promise.allSettled(cleanups.splice(0).map((c) => c()));
});

describe('ModelWorker queue error log', () => {
  it('logs one "bullmq queue error" line per 10 s while Redis is away, carrying the count it held back', async () => {
    const url = `redis://127.0.0.1:${await freePort()}`;
    const settings = BullmqSettingsSchema.parse({ redisUrl: url, prefix: 'mw-queue-errors' });
    // ioredis's default backoff is 50 ms more per attempt: a steady error every 200 ms instead.
    const shared: Redis = redisConnection(url, { retryStrategy: () => 200 });
    const lines: Array<{ msg: string; heldBack: unknown; rawSoFar: number }> = [];
    let raw = 0;
    const logger: TransportLogger = {
      warn: (o, msg) => lines.push({ msg, heldBack: (o as { heldBack?: unknown }).heldBack, rawSoFar: raw }),
      info: () => undefined,
      error: () => undefined,
      debug: () => undefined,
    };
    const mw = new ModelWorker({
      model: 'm',
      queue: 'm.requests',
      priorityLevels: 1,
      settings,
      tuning: { logger },
      shared: () => shared,
      processor: async () => undefined,
      intakeOff: () => true,
      holds: () => false,
    });
    // Counted after the worker's own listener has logged (or not) the same error.
    mw.counter.on('error', () => raw++);
    cleanups.push(
      () => mw.worker.close(true),
      () => mw.counter.close(),
      async () => mw.connection.disconnect(),
      async () => shared.disconnect(),
    );
    await new Promise((r) => setTimeout(r, 11_500));
    const queueLines = lines.filter((l) => l.msg === 'bullmq queue error');
    // At one error per ~200 ms, ~55 errors: unthrottled that is ~55 lines.
    expect(raw).toBeGreaterThanOrEqual(20);
    expect(queueLines).toHaveLength(2);
    expect(queueLines[0]).toMatchObject({ heldBack: 0, rawSoFar: 0 });
    // The second line counts every error between the two lines.
    const second = queueLines[1]!;
    expect(second.heldBack).toBe(second.rawSoFar - 1);
    expect(second.rawSoFar).toBeGreaterThanOrEqual(10);
  }, 30_000);
});
