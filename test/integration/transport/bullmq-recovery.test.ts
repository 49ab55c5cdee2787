// BullMQ transport under trouble: job data that is not JSON. Real Redis, a unique prefix per test.
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { bullmqSettings, queueJobs } from './bullmq-harness.ts';
import { Inbox, outcomeFor, startWith } from './conformance-kit.ts';

const track = closeAfterEach();

describe('bullmq transport recovery', () => {
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
});
