// BullMQ transport under trouble: a held job whose lock lapsed, job data that is not JSON, and
// fetching while only some priorities are paused. Real Redis, a unique prefix per test.
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { bullmqSettings, queueJobs } from './bullmq-harness.ts';
import { idOf, Inbox, makeRequest, outcomeFor, sleep, startWith } from './conformance-kit.ts';

const track = closeAfterEach();

describe('bullmq transport recovery', () => {
  it('a held job whose lock lapsed and that comes back to the same worker is not delivered twice; the new fetch is completed and keeps its lock', async () => {
    const settings = bullmqSettings({ lockDurationMs: 1_000 });
    const model = uniqueName('relock');
    const queue = `${model}.requests`;
    const producer = track(new BullmqProducer(settings));
    await producer.publish(makeRequest(model, 'held', 1));
    const t = track(new BullmqTransport(settings, { stalledIntervalMs: 200, prefetch: 2 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const [d] = await inbox.waitFor(1, 10_000);
    // The lock lapses while the job is held (as in a Redis outage longer than the lock): the
    // stalled check puts the job back, and this worker, with a free slot, fetches it again.
    const admin = new Redis(settings.redisUrl);
    try {
      await admin.del(`${settings.prefix}:${queue}:held:lock`);
      const deadline = Date.now() + 5_000;
      while ((await admin.hget(`${settings.prefix}:${queue}:held`, 'stc')) !== '1' && Date.now() < deadline) await sleep(50);
      expect(await admin.hget(`${settings.prefix}:${queue}:held`, 'stc')).toBe('1');
      // Several lock durations: the job stays with this worker (its new lock renewed), delivered once.
      await sleep(3_000);
      expect(inbox.all.map(idOf)).toEqual(['held']);
      expect(await admin.lrange(`${settings.prefix}:${queue}:active`, 0, -1)).toEqual(['held']);
      expect(await admin.hget(`${settings.prefix}:${queue}:held`, 'stc')).toBe('1');
    } finally {
      admin.disconnect();
    }
    await t.settle([outcomeFor(d!)]);
    const [done] = await queueJobs(settings, queue, ['completed']);
    expect(done?.id).toBe('held');
    // No fetch slot was left behind: both slots of prefetch 2 take new jobs.
    await producer.publish([makeRequest(model, 'next-1', 1), makeRequest(model, 'next-2', 1)]);
    expect((await inbox.waitFor(3, 10_000)).slice(1).map(idOf).sort()).toEqual(['next-1', 'next-2']);
  }, 30_000);

  it('a job whose data is not JSON is delivered as raw text and dead-lettered INVALID_MESSAGE, not left to stall out', async () => {
    const settings = bullmqSettings({ lockDurationMs: 1_000 });
    const model = uniqueName('not-json');
    const queue = `${model}.requests`;
    const q = new Queue(queue, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
    const admin = new Redis(settings.redisUrl);
    try {
      await q.add('request', { placeholder: true }, { jobId: 'foreign', priority: 1 });
      // A writer other than BullMQ's clients left text that is not JSON as the job's data.
      await admin.hset(`${settings.prefix}:${queue}:foreign`, 'data', '{not json');
    } finally {
      await q.close();
      admin.disconnect();
    }
    const t = track(new BullmqTransport(settings, { stalledIntervalMs: 200, maxStalledCount: 1, reaperIntervalMs: 200 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const [d] = await inbox.waitFor(1, 5_000);
    expect(Buffer.from(d!.body as Uint8Array).toString('utf8')).toBe('{not json');
    await t.settle([outcomeFor(d!)]);
    const dlq = await queueJobs(settings, `${model}.dlq`, ['wait']);
    expect(dlq.map((j) => [j.data.reason, j.data.original, j.data.source.jobId])).toEqual([['INVALID_MESSAGE', '{not json', 'foreign']]);
    // Completed (BullMQ's own readers cannot parse it back: read the set).
    const admin2 = new Redis(settings.redisUrl);
    try {
      expect(await admin2.zrange(`${settings.prefix}:${queue}:completed`, 0, -1)).toEqual(['foreign']);
    } finally {
      admin2.disconnect();
    }
  }, 20_000);

  it('while low priorities are paused, fetching rests after the first paused job it meets instead of fetching and putting back a whole window', async () => {
    const settings = bullmqSettings({ lockDurationMs: 5_000 });
    const model = uniqueName('bounces');
    const queue = `${model}.requests`;
    const producer = track(new BullmqProducer(settings));
    await producer.publish(Array.from({ length: 300 }, (_, i) => makeRequest(model, `low-${i}`, 2)));
    const t = track(new BullmqTransport(settings, { stalledIntervalMs: 1_000, prefetch: 256, pausedPollMs: 200 }));
    const inbox = new Inbox();
    t.pause(model, [1, 2]);
    await startWith(t, model, inbox);
    t.pause(model, [1, 2]);
    const admin = new Redis(settings.redisUrl);
    try {
      const events = `${settings.prefix}:${queue}:events`;
      const from = String((await admin.xrevrange(events, '+', '-', 'COUNT', 1))[0]?.[0] ?? '0');
      await sleep(2_000);
      const sentAt = Date.now();
      await producer.publish(makeRequest(model, 'urgent', 0));
      const [urgent] = await inbox.waitFor(1, 5_000);
      expect(idOf(urgent!)).toBe('urgent');
      expect(Date.now() - sentAt).toBeLessThan(1_000);
      const putBack = (await admin.xrange(events, `(${from}`, '+')).filter(([, f]) => f.includes('waiting') && f.includes('active')).length;
      // One job met per rest of 200 ms (about 11 in 2.2 s); the whole window of 256 each time was about 4,000.
      expect(putBack).toBeLessThan(40);
      expect(putBack).toBeGreaterThan(0);
    } finally {
      admin.disconnect();
    }
    expect(inbox.all.map(idOf)).toEqual(['urgent']);
  }, 20_000);
});
