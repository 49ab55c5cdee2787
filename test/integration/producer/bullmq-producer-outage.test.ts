// BullMQ producer publish() when Redis goes away after the first publish (a restart, a failover,
// a network cut): it must fail, naming Redis, within connectTimeoutMs instead of waiting for it
// forever; and publish again once Redis is back. Redis is cut off by a proxy in front of the
// shared test Redis, which itself is never stopped.
import { afterEach, describe, expect, it } from 'vitest';
import type { FleetError } from '../../../src/errors/fleet-error.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import type { TransportLogger } from '../../../src/transport/kafka/kafka-client.ts';
import { renderName } from '../../../src/transport/names.ts';
import { uniqueName } from '../../helpers/services.ts';
import { bullmqSettings, lateRedis, queueJobs } from '../transport/bullmq-harness.ts';
import { makeRequest } from '../transport/conformance-kit.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const c of open.splice(0).reverse()) await c.close().catch(() => undefined);
});

describe('bullmq producer with Redis gone mid-run', () => {
  it('publish() fails within about connectTimeoutMs naming Redis, and publishes again once Redis is back', async () => {
    const base = bullmqSettings();
    const late = await lateRedis(base.redisUrl);
    open.push(late);
    await late.up();
    const model = uniqueName('publish-outage');
    const producer = new BullmqProducer({ ...base, redisUrl: late.url, connectTimeoutMs: 1_000 });
    open.push(producer);
    await producer.publish([makeRequest(model, 'before', 0)]);
    await late.close();

    const startedAt = Date.now();
    const outcome = await Promise.race([
      producer.publish([makeRequest(model, 'during', 0)]).then(() => 'published', (e: unknown) => e as FleetError),
      new Promise<string>((r) => setTimeout(() => r('still waiting'), 10_000)),
    ]);
    expect(outcome).toMatchObject({ code: 'TRANSPORT_ERROR', retriable: true });
    expect((outcome as FleetError).message).toMatch(/Redis at 127\.0\.0\.1:\d+ .*1000 ms.*check transport\.bullmq\.redisUrl/);
    expect(Date.now() - startedAt).toBeLessThan(5_000);

    // Back: the producer reconnects by itself and the publish goes through.
    await late.up();
    await producer.publish([makeRequest(model, 'after', 0)]);
    const ids = (await queueJobs(base, renderName(base.queueTemplate, model), ['wait', 'prioritized'])).map((j) => j.id).sort();
    expect(ids).toContain('after');
    expect(ids).toContain('before');
  }, 40_000);

  it('logs "bullmq queue error" one line per 10 s while Redis is away, carrying the count held back', async () => {
    const base = bullmqSettings();
    const late = await lateRedis(base.redisUrl);
    open.push(late);
    await late.up();
    const lines: Array<{ msg: string; heldBack: unknown }> = [];
    const logger: TransportLogger = {
      warn: (o, msg) => lines.push({ msg, heldBack: (o as { heldBack?: unknown }).heldBack }),
      info: () => undefined,
      error: () => undefined,
      debug: () => undefined,
    };
    const producer = new BullmqProducer({ ...base, redisUrl: late.url }, { logger });
    open.push(producer);
    // Two models: two queues on the producer's connection.
    await producer.publish([makeRequest(uniqueName('log-outage-a'), 'a', 0), makeRequest(uniqueName('log-outage-b'), 'b', 0)]);
    await late.close();
    // ioredis's reconnect delay grows by 50 ms an attempt: about 20 errors in this, on each queue.
    await new Promise((r) => setTimeout(r, 11_500));
    const queueLines = lines.filter((l) => l.msg === 'bullmq queue error');
    expect(queueLines).toHaveLength(2);
    expect(queueLines[0]?.heldBack).toBe(0);
    expect(queueLines[1]?.heldBack).toBeGreaterThanOrEqual(20);
  }, 40_000);
});
