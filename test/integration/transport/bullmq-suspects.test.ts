// The BullMQ transport's device-hang suspect counts (a hash beside each request queue): what
// removes an entry, against the real Redis of the test services, a unique prefix per test.
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { bullmqSettings, queueJobs } from './bullmq-harness.ts';
import { idOf, Inbox, makeRequest, outcomeFor, sleep, startWith } from './conformance-kit.ts';

const track = closeAfterEach();
let admin: Redis | undefined;
afterEach(() => {
  admin?.disconnect();
  admin = undefined;
});

/** The suspect counts of `queue`, read straight from Redis. */
async function suspectsOf(redisUrl: string, prefix: string, queue: string): Promise<Record<string, string>> {
  admin ??= new Redis(redisUrl);
  return admin.hgetall(`${prefix}:${queue}:npu-fleet-suspects`);
}

async function eventually<T>(read: () => Promise<T>, ok: (v: T) => boolean, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await read();
    if (ok(v) || Date.now() > deadline) return v;
    await sleep(50);
  }
}

describe('bullmq device-hang suspect counts', () => {
  it('a suspect BullMQ failed after its workers died (answered WORKER_CRASHED by the reaper) leaves no count behind', async () => {
    const settings = bullmqSettings({ lockDurationMs: 1_000 });
    const model = uniqueName('suspect-stalled');
    const queue = `${model}.requests`;
    const producer = track(new BullmqProducer(settings));
    await producer.publish(makeRequest(model, 'poison', 1));
    // A worker has it on a device that hangs: the count is recorded, then the worker dies.
    const first = track(new BullmqTransport(settings, { stalledIntervalMs: 200, maxStalledCount: 0, reaperIntervalMs: 200 }));
    const inbox = new Inbox();
    await startWith(first, model, inbox);
    const [d] = await inbox.waitFor(1, 10_000);
    expect(await first.markSuspect([d!])).toBe(true);
    expect(await suspectsOf(settings.redisUrl, settings.prefix, queue)).toEqual({ poison: '1' });
    await first.abort();
    // Past maxStalledCount the next worker's BullMQ fails it, and its reaper answers it.
    const second = track(new BullmqTransport(settings, { stalledIntervalMs: 200, maxStalledCount: 0, reaperIntervalMs: 200 }));
    await startWith(second, model, new Inbox());
    const dlq = await eventually(() => queueJobs(settings, `${model}.dlq`, ['wait', 'prioritized']), (jobs) => jobs.length > 0, 15_000);
    expect(dlq.map((j) => j.data.reason)).toEqual(['WORKER_CRASHED']);
    // The job is gone: a replay of its DLQ record (same job id) must start from no count, and the entry would stay for good.
    expect(await eventually(() => suspectsOf(settings.redisUrl, settings.prefix, queue), (h) => Object.keys(h).length === 0, 3_000)).toEqual({});
  }, 40_000);

  it('counts of jobs answered without it being read, or removed by their producer, are swept; those of jobs still queued or held stay', async () => {
    const settings = bullmqSettings({ lockDurationMs: 2_000 });
    const model = uniqueName('suspect-sweep');
    const queue = `${model}.requests`;
    const producer = track(new BullmqProducer(settings));
    await producer.publish(['answered', 'held'].map((id) => makeRequest(model, id, 1)));
    const t = track(new BullmqTransport(settings, { stalledIntervalMs: 500, reaperIntervalMs: 200 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const got = await inbox.waitFor(2, 10_000);
    expect(await t.markSuspect(got)).toBe(true);
    // Answered by a worker that saw no count (its read of the count failed or timed out): not forgotten then.
    await t.settle([outcomeFor(got.find((d) => idOf(d) === 'answered')!)]);
    // Counted by an earlier worker: one job is due later (delayed), the other its producer withdraws.
    const q = new Queue(queue, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
    try {
      for (const id of ['queued', 'removed']) await q.add('request', makeRequest(model, id, 1), { jobId: id, delay: 60_000 });
      admin ??= new Redis(settings.redisUrl);
      for (const id of ['queued', 'removed']) await admin.hincrby(`${settings.prefix}:${queue}:npu-fleet-suspects`, id, 1);
      await q.remove('removed');
    } finally {
      await q.close();
    }
    expect(Object.keys(await suspectsOf(settings.redisUrl, settings.prefix, queue)).sort()).toEqual(['answered', 'held', 'queued', 'removed']);
    const left = await eventually(() => suspectsOf(settings.redisUrl, settings.prefix, queue), (h) => Object.keys(h).length <= 2, 5_000);
    expect(left).toEqual({ queued: '1', held: '1' });
  }, 30_000);
});
