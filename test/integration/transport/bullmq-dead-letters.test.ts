import { Job, Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BullmqDeadLetters } from '../../../src/transport/bullmq/bullmq-dead-letters.ts';
import { uniqueName } from '../../helpers/services.ts';
import { bullmqSettings, queueJobs } from './bullmq-harness.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  vi.restoreAllMocks();
  await Promise.allSettled(open.splice(0).map((x) => x.close()));
});

/** A DLQ record as answer-jobs.ts writes it. */
const record = (model: string, id: string): Record<string, unknown> => ({
  reason: 'UNKNOWN_MODEL',
  message: 'not served',
  source: { queue: `${model}.requests`, jobId: id },
  priority: 1,
  original: { id, model, createdAt: 1, inputs: [] },
});

describe('BullmqDeadLetters', () => {
  it('a record removed while the replay runs (TTL sweep, another replay) is passed over; the replay goes on with the rest', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('bdl').replace(/[^A-Za-z0-9-]/g, '');
    const dlq = new Queue(`${model}.dlq`, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
    open.push(dlq);
    const jobs: Job[] = [];
    for (const id of ['r1', 'r2', 'r3']) jobs.push(await dlq.add('dead-letter', record(model, id)));
    const dl = new BullmqDeadLetters(settings);
    open.push(dl);
    // While the replay re-sends r1 (its page of records loaded), r2's record goes (what the DLQ TTL sweeper does).
    const fromId = Job.fromId.bind(Job);
    vi.spyOn(Job, 'fromId').mockImplementation(async (queue, jobId) => {
      if (queue.name === `${model}.requests` && jobId === 'r1') await jobs[1]!.remove();
      return fromId(queue, jobId);
    });
    const report = await dl.replay({ model });
    expect(report).toMatchObject({ scanned: 3, matched: 2, replayed: 2, skipped: [] });
    const sent = await queueJobs(settings, `${model}.requests`, ['wait', 'prioritized']);
    expect(sent.map((j) => j.id).sort()).toEqual(['r1', 'r3']);
    expect((await dl.list({ model })).scanned).toBe(0);
  });

  it('two replays racing over the same DLQ re-send each record once (with and without a request id), and leave it empty', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('bdl').replace(/[^A-Za-z0-9-]/g, '');
    const dlq = new Queue(`${model}.dlq`, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
    open.push(dlq);
    const n = 40;
    // Half carry a request id (jobId = id), half do not (an invalid message that named none).
    await dlq.addBulk(
      Array.from({ length: n }, (_, i) => {
        const data = record(model, `r${i}`);
        if (i % 2 === 1) data['original'] = { model, createdAt: 1, inputs: 'not a list' };
        return { name: 'dead-letter', data };
      }),
    );
    const [a, b] = [new BullmqDeadLetters(settings), new BullmqDeadLetters(settings)];
    open.push(a, b);
    const reports = await Promise.all([a.replay({ model }), b.replay({ model })]);
    expect(reports[0].replayed + reports[1].replayed).toBe(n);
    // Every job BullMQ really added to the request queue (an add of a retained jobId is not one).
    const redis = new Redis(settings.redisUrl);
    open.push({ close: async () => void redis.disconnect() });
    const events = await redis.xrange(`${settings.prefix}:${model}.requests:events`, '-', '+');
    expect(events.filter(([, fields]) => fields[0] === 'event' && fields[1] === 'added')).toHaveLength(n);
    expect(await queueJobs(settings, `${model}.requests`, ['wait', 'prioritized'])).toHaveLength(n);
    expect((await a.list({ model })).scanned).toBe(0);
  });

  it('a record claimed by a replay that died before re-sending it stays in the DLQ, and is re-sent once the claim lapses', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('bdl').replace(/[^A-Za-z0-9-]/g, '');
    const dlq = new Queue(`${model}.dlq`, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
    open.push(dlq);
    const job = await dlq.add('dead-letter', record(model, 'r1'));
    const redis = new Redis(settings.redisUrl);
    open.push({ close: async () => void redis.disconnect() });
    // What a replay killed between its claim and the re-send leaves behind (its claim, shortened here).
    await redis.set(`${settings.prefix}:${model}.dlq:${job.id ?? ''}:replay-claim`, 'dead-replay', 'PX', 1_000);
    const dl = new BullmqDeadLetters(settings);
    open.push(dl);
    expect(await dl.replay({ model })).toMatchObject({ matched: 1, replayed: 0, skipped: [{ ref: `${model}.dlq/${job.id ?? ''}`, why: expect.stringMatching(/another replay is re-sending it/) }] });
    expect((await dl.list({ model })).scanned).toBe(1);
    await new Promise((r) => setTimeout(r, 1_100));
    expect(await dl.replay({ model })).toMatchObject({ replayed: 1, skipped: [] });
    expect((await dl.list({ model })).scanned).toBe(0);
  });

  it('a re-send that fails leaves the record in the DLQ, unclaimed: the next replay sends it', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('bdl').replace(/[^A-Za-z0-9-]/g, '');
    const dlq = new Queue(`${model}.dlq`, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
    open.push(dlq);
    await dlq.add('dead-letter', record(model, 'r1'));
    const redis = new Redis(settings.redisUrl);
    open.push({ close: async () => void redis.disconnect() });
    // The request queue's event stream key holds a string: every add to it fails (WRONGTYPE).
    const events = `${settings.prefix}:${model}.requests:events`;
    await redis.set(events, 'not a stream');
    const dl = new BullmqDeadLetters(settings);
    open.push(dl);
    await expect(dl.replay({ model })).rejects.toThrow(/0 record\(s\) were re-sent before it/);
    expect((await dl.list({ model })).scanned).toBe(1);
    expect(await redis.keys(`${settings.prefix}:*replay-claim*`)).toEqual([]);
    await redis.del(events);
    expect(await dl.replay({ model })).toMatchObject({ replayed: 1, skipped: [] });
    expect((await queueJobs(settings, `${model}.requests`, ['wait', 'prioritized'])).map((j) => j.id)).toEqual(['r1']);
  });

  // A replay stopped (Ctrl-C, a crash) between re-adding a record's request and removing the record
  // leaves both behind. The next replay removed the re-sent request once it was answered and added
  // it again: the request served twice.
  it('a record whose request a stopped replay had re-sent already is passed over and removed, not re-sent again', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('bdl').replace(/[^A-Za-z0-9-]/g, '');
    const connection = { url: settings.redisUrl } as never;
    const dlq = new Queue(`${model}.dlq`, { connection, prefix: settings.prefix });
    open.push(dlq);
    const [r1] = [await dlq.add('dead-letter', record(model, 'r1')), await dlq.add('dead-letter', record(model, 'r2'))];
    const first = new BullmqDeadLetters(settings);
    open.push(first);
    // The first replay dies right after its re-add of r1: the removal of r1's record never happens.
    const remove = Job.prototype.remove;
    vi.spyOn(Job.prototype, 'remove').mockImplementation(function (this: Job, ...args: Parameters<Job['remove']>) {
      return this.queueName === `${model}.dlq` ? Promise.reject(new Error('killed')) : remove.apply(this, args);
    });
    await expect(first.replay({ model })).rejects.toThrow(/killed/);
    vi.restoreAllMocks();
    // Its claim on the record lapses.
    const redis = new Redis(settings.redisUrl);
    open.push({ close: async () => void redis.disconnect() });
    await redis.del(`${settings.prefix}:${model}.dlq:${r1.id ?? ''}:replay-claim`);
    // The re-sent r1 is answered.
    const worker = new Worker(`${model}.requests`, () => Promise.resolve('ok'), { connection, prefix: settings.prefix });
    open.push(worker);
    await vi.waitFor(async () => expect((await queueJobs(settings, `${model}.requests`, ['completed'])).map((j) => j.id)).toEqual(['r1']), { timeout: 10_000 });
    await worker.close();

    const dl = new BullmqDeadLetters(settings);
    open.push(dl);
    expect(await dl.replay({ model, dryRun: true })).toMatchObject({ matched: 2, replayed: 1, alreadyReplayed: 1, skipped: [] });
    expect(await dl.replay({ model })).toMatchObject({ matched: 2, replayed: 1, alreadyReplayed: 1, skipped: [] });
    expect((await queueJobs(settings, `${model}.requests`, ['wait', 'prioritized'])).map((j) => j.id)).toEqual(['r2']);
    expect((await dl.list({ model })).scanned).toBe(0);
  });

  it('list and a dry run write nothing to Redis, also for a model whose DLQ does not exist', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('bdl').replace(/[^A-Za-z0-9-]/g, '');
    const dl = new BullmqDeadLetters(settings);
    open.push(dl);
    const redis = new Redis(settings.redisUrl);
    open.push({ close: async () => void redis.disconnect() });
    expect(await dl.list({ model: 'nosuch' })).toMatchObject({ scanned: 0, matched: 0 });
    expect(await redis.keys(`${settings.prefix}:*`)).toEqual([]);

    // A record whose request was answered before: a dry run looks at the request and reply queues too.
    const dlq = new Queue(`${model}.dlq`, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
    open.push(dlq);
    await dlq.add('dead-letter', record(model, 'r1'));
    const before = (await redis.keys(`${settings.prefix}:*`)).sort();
    expect(await dl.replay({ model, dryRun: true })).toMatchObject({ matched: 1, replayed: 1 });
    expect(await dl.list({ model })).toMatchObject({ scanned: 1 });
    expect((await redis.keys(`${settings.prefix}:*`)).sort()).toEqual(before);
  });
});
