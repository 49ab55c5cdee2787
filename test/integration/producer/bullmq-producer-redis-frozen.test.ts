// BullMQ producer whose redis-server is frozen (SIGSTOP: a hung host, a paused VM) after the producer
// reached it: the process is alive, the TCP connections stay open and nothing answers, so no
// 'close' ever comes. publish() must fail within about transport.bullmq.connectTimeoutMs with a
// retriable error naming that setting, not wait for good. Own redis-server (freezing the shared
// one would stall every other test file).
import { afterEach, describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { startKillableRedis } from '../../helpers/killable-redis.ts';
import { uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { bullmqSettings } from '../transport/bullmq-harness.ts';
import { makeRequest } from '../transport/conformance-kit.ts';

const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => undefined);
});

/** How the call settled, or 'still waiting' after `ms`. */
async function settledWithin(work: Promise<unknown>, ms: number): Promise<{ outcome: unknown; tookMs: number }> {
  const from = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    work.then(
      () => 'published',
      (e: unknown) => e,
    ),
    new Promise<string>((r) => (timer = setTimeout(() => r('still waiting'), ms))),
  ]);
  clearTimeout(timer);
  return { outcome, tookMs: Date.now() - from };
}

describe('bullmq producer with its redis-server frozen (SIGSTOP)', () => {
  it('publish() fails within about connectTimeoutMs, retriable, naming transport.bullmq.connectTimeoutMs', async () => {
    const redis = await startKillableRedis(tempDir('npu-fleet-bullmq-frozen-pub-'));
    cleanup.push(() => redis.stop());
    const connectTimeoutMs = 2_000;
    const producer = new BullmqProducer({ ...bullmqSettings({ redisUrl: redis.url }), connectTimeoutMs });
    cleanup.push(() => producer.close());
    const model = uniqueName('frozen-publish');
    await producer.publish(makeRequest(model, 'before', 0));

    redis.freeze();
    const { outcome, tookMs } = await settledWithin(producer.publish(makeRequest(model, 'during', 0)), connectTimeoutMs + 8_000);
    // Before the fix: 'still waiting' (the publish waited for Redis for good).
    expect(outcome).toBeInstanceOf(FleetError);
    const err = outcome as FleetError;
    expect({ code: err.code, retriable: err.retriable }).toEqual({ code: 'TRANSPORT_ERROR', retriable: true });
    expect(err.message).toMatch(/did not answer within 2000 ms/);
    expect(err.message).toMatch(/transport\.bullmq\.connectTimeoutMs/);
    expect(tookMs).toBeGreaterThanOrEqual(connectTimeoutMs - 100);
    expect(tookMs).toBeLessThan(connectTimeoutMs + 3_000);
  }, 40_000);

  it('a request() sent to a frozen Redis fails with the same error, not its TIMEOUT much later', async () => {
    const redis = await startKillableRedis(tempDir('npu-fleet-bullmq-frozen-req-'));
    cleanup.push(() => redis.stop());
    const connectTimeoutMs = 2_000;
    const producer = new BullmqProducer({ ...bullmqSettings({ redisUrl: redis.url }), connectTimeoutMs }, { clientId: uniqueName('frozen') });
    cleanup.push(() => producer.close());
    const model = uniqueName('frozen-request');
    // The inbox opens (its reply worker starts) while Redis answers.
    const first = await producer.request(makeRequest(model, 'unanswered', 0), { timeoutMs: 300 }).then(() => undefined, (e: unknown) => e as FleetError);
    expect(first?.code).toBe('TIMEOUT');

    redis.freeze();
    const { outcome, tookMs } = await settledWithin(producer.request(makeRequest(model, 'during', 0), { timeoutMs: 60_000 }), connectTimeoutMs + 8_000);
    expect(outcome).toBeInstanceOf(FleetError);
    const err = outcome as FleetError;
    expect({ code: err.code, retriable: err.retriable }).toEqual({ code: 'TRANSPORT_ERROR', retriable: true });
    expect(err.message).toMatch(/transport\.bullmq\.connectTimeoutMs/);
    expect(tookMs).toBeLessThan(connectTimeoutMs + 3_000);
  }, 40_000);

  it('a first publish to a Redis frozen before it says it did not answer (the PING given up), not that it refused', async () => {
    const redis = await startKillableRedis(tempDir('npu-fleet-bullmq-frozen-first-'));
    cleanup.push(() => redis.stop());
    redis.freeze();
    const connectTimeoutMs = 2_000;
    const producer = new BullmqProducer({ ...bullmqSettings({ redisUrl: redis.url }), connectTimeoutMs });
    cleanup.push(() => producer.close());
    const { outcome, tookMs } = await settledWithin(producer.publish(makeRequest(uniqueName('frozen-first'), 'first', 0)), connectTimeoutMs + 8_000);
    expect(outcome).toBeInstanceOf(FleetError);
    const err = outcome as FleetError;
    expect({ code: err.code, retriable: err.retriable }).toEqual({ code: 'TRANSPORT_ERROR', retriable: true });
    expect(err.message).toMatch(/did not answer within 2000 ms/);
    expect(tookMs).toBeLessThan(connectTimeoutMs + 3_000);
  }, 40_000);
});
