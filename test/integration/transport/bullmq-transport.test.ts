// BullMQ-only behaviour beyond the conformance suite: job layout (jobId = id, native priority,
// JSON data, return value = result), lock renewal while a job waits locally, awkward ids.
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { requestToJson, resultToJson } from '../../../src/codec/index.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { jobIdFor } from '../../../src/transport/bullmq/bullmq-names.ts';
import { uniqueName } from '../../helpers/services.ts';
import { idOf, Inbox, makeRequest, outcomeFor, ResultSink, startWith } from './conformance-kit.ts';
import { BullmqDeadLetters } from '../../../src/transport/bullmq/bullmq-dead-letters.ts';
import { bullmqSettings, lateRedis, queueJobs } from './bullmq-harness.ts';

const track = closeAfterEach();

describe('bullmq transport', () => {
  it('start fails within transport.bullmq.connectTimeoutMs with an error naming transport.bullmq.redisUrl when Redis does not answer', async () => {
    const t = track(new BullmqTransport(bullmqSettings({ redisUrl: 'redis://:secret@127.0.0.1:1', connectTimeoutMs: 1_000 })));
    const startedAt = Date.now();
    const err: unknown = await startWith(t, uniqueName('no-redis'), new Inbox()).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(Date.now() - startedAt).toBeLessThan(5_000);
    expect(err).toBeInstanceOf(FleetError);
    const e = err as FleetError;
    expect(e.code).toBe('TRANSPORT_ERROR');
    expect(e.retriable).toBe(true);
    expect(e.message).toMatch(/Redis at 127\.0\.0\.1:1 did not answer within 1000 ms \(.*ECONNREFUSED.*\); check transport\.bullmq\.redisUrl/);
    expect(e.message).not.toContain('secret');
  });

  it("the next worker process of a device puts back at once the jobs its dead predecessor held (from the predecessor's note), not when their locks lapse", async () => {
    const settings = bullmqSettings({ lockDurationMs: 60_000 });
    const model = uniqueName('predecessor');
    const producer = track(new BullmqProducer(settings));
    await producer.publish(Array.from({ length: 5 }, (_, i) => makeRequest(model, `p${i}`, 1)));
    const start = (t: BullmqTransport, inbox: Inbox, previous: string | undefined, save: (note: string) => void) =>
      t.start({ subscriptions: [{ model, priorityLevels: 3 }], onDeliveries: inbox.onDeliveries, predecessor: { previous, save } });

    let note: string | undefined;
    const dead = new BullmqTransport(settings, { stalledIntervalMs: 500 });
    const deadInbox = new Inbox();
    await start(dead, deadInbox, undefined, (n) => (note = n));
    await deadInbox.waitFor(5, 10_000);
    expect(note).toBeDefined();
    await dead.abort(); // a crash: its five jobs stay active under its locks (60 s)

    // Without the note, nothing comes back while the locks hold.
    const blind = track(new BullmqTransport(settings, { stalledIntervalMs: 500 }));
    const blindInbox = new Inbox();
    await start(blind, blindInbox, undefined, () => {});
    await blindInbox.quietFor(2_000);
    expect(blindInbox.all).toHaveLength(0);
    await blind.close();

    const next = track(new BullmqTransport(settings, { stalledIntervalMs: 500 }));
    const inbox = new Inbox();
    let nextNote: string | undefined;
    const startedAt = Date.now();
    await start(next, inbox, note, (n) => (nextNote = n));
    const got = await inbox.waitFor(5, 10_000);
    expect(Date.now() - startedAt).toBeLessThan(10_000);
    expect(got.map(idOf).sort()).toEqual(['p0', 'p1', 'p2', 'p3', 'p4']);
    expect(nextNote).toBeDefined();
    expect(nextNote).not.toBe(note);
    await next.settle(got.map(outcomeFor));
  });

  it('a request is a job with jobId = id, priority p + 1 and the JSON envelope; its result is the return value and a reply job named by the request job', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('layout');
    const producer = track(new BullmqProducer(settings));
    const request = makeRequest(model, 'job-1', 2, { replyTo: `${model}.out` });
    await producer.publish(request);
    const [job] = await queueJobs(settings, `${model}.requests`, ['prioritized']);
    expect(job?.id).toBe('job-1');
    expect(job?.priority).toBe(3);
    expect(job?.data).toEqual(JSON.parse(JSON.stringify(requestToJson(request))));

    const t = track(new BullmqTransport(settings, { stalledIntervalMs: 500 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const [d] = await inbox.waitFor(1, 10_000);
    expect(d?.priority).toBe(2);
    const outcome = outcomeFor(d as NonNullable<typeof d>);
    await t.settle([outcome]);
    const [done] = await queueJobs(settings, `${model}.requests`, ['completed']);
    const expected = JSON.parse(JSON.stringify(resultToJson(outcome.result)));
    expect(done?.id).toBe('job-1');
    expect(done?.returnvalue).toEqual(expected);
    const [reply] = await queueJobs(settings, `${model}.out`, ['wait']);
    // Named by the request job (id and timestamp): see replyJobId.
    expect(reply?.id).toBe(`job-1@${done?.timestamp}`);
    expect(reply?.data).toEqual(expected);
  });

  it('close() leaves no Redis connection of its own open', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('conns');
    const admin = new Redis(settings.redisUrl);
    const ours = async (): Promise<number> =>
      ((await admin.client('LIST')) as string).split('\n').filter((l) => l.includes(`name=npu-fleet:${settings.prefix}:${model}`)).length;
    try {
      const t = new BullmqTransport(settings);
      await startWith(t, model, new Inbox());
      expect(await ours()).toBeGreaterThan(0);
      await t.close();
      const end = Date.now() + 5_000;
      while ((await ours()) > 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
      expect(await ours()).toBe(0);
    } finally {
      admin.disconnect();
    }
  });

  it('after a reconnect, a job whose fetch the lost connection cut off is put back at once, not after its lock lapses', async () => {
    // A 60 s lock: without the reclaim the job would come back only after that.
    const settings = bullmqSettings({ lockDurationMs: 60_000 });
    const model = uniqueName('cutoff');
    const queue = `${model}.requests`;
    const t = track(new BullmqTransport(settings));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const workerId = (t as unknown as { workers: Map<string, { worker: { id: string } }> }).workers.get(model)!.worker.id;
    const admin = new Redis(settings.redisUrl);
    const raw = new Worker(queue, null, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
    try {
      // The cut-off fetch: Redis makes the job active under this worker's lock, and the reply
      // never reaches it. (Intake is paused meanwhile, so the worker does not fetch it itself.)
      t.pause(model, [0, 1, 2]);
      await new Promise((r) => setTimeout(r, 300));
      const producer = track(new BullmqProducer(settings));
      await producer.publish(makeRequest(model, 'cut-off', 1));
      const job = await raw.getNextJob(`${workerId}:lost`);
      expect(job?.id).toBe('cut-off');
      t.resume(model, [0, 1, 2]);
      // The lost connection: the worker's connections are dropped and come back.
      const list = String(await admin.call('CLIENT', 'LIST')).split('\n');
      const ids = list.filter((l) => l.includes(`name=npu-fleet:${settings.prefix}:${queue}`)).map((l) => /id=(\d+)/.exec(l)?.[1]);
      expect(ids.length).toBeGreaterThan(0);
      for (const id of ids) await admin.call('CLIENT', 'KILL', 'ID', id as string);
      const startedAt = Date.now();
      expect((await inbox.waitFor(1, 15_000)).map(idOf)).toEqual(['cut-off']);
      expect(Date.now() - startedAt).toBeLessThan(15_000);
    } finally {
      await raw.close(true);
      admin.disconnect();
    }
  }, 40_000);

  it('keeps the lock while a job waits locally for several lock durations (no re-run elsewhere)', async () => {
    const settings = bullmqSettings({ lockDurationMs: 1_000 });
    const model = uniqueName('lock');
    const producer = track(new BullmqProducer(settings));
    await producer.publish([makeRequest(model, 'held', 0)]);
    const a = track(new BullmqTransport(settings, { stalledIntervalMs: 300 }));
    const b = track(new BullmqTransport(settings, { stalledIntervalMs: 300 }));
    const inboxA = new Inbox();
    const inboxB = new Inbox();
    await startWith(a, model, inboxA);
    const [d] = await inboxA.waitFor(1, 10_000);
    await startWith(b, model, inboxB);
    // Four lock durations with B's stalled checker running: B must not get the job.
    expect(await inboxB.quietFor(4_000)).toEqual([]);
    await a.settle([outcomeFor(d as NonNullable<typeof d>)]);
    const [done] = await queueJobs(settings, `${model}.requests`, ['completed']);
    expect(done?.id).toBe('held');
  });

  it('ids BullMQ refuses as job ids (integers, ":") still round-trip through request()', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('ids');
    const producer = track(new BullmqProducer(settings));
    const t = track(new BullmqTransport(settings));
    await t.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void t.settle(ds.map(outcomeFor)) });
    for (const id of ['42', 'a:b']) {
      const r = await producer.request(makeRequest(model, id, 0), { timeoutMs: 10_000 });
      expect(r.id).toBe(id);
    }
    const jobs = await queueJobs(settings, `${model}.requests`, ['completed']);
    expect(jobs.map((j) => j.id).sort()).toEqual([jobIdFor('42'), jobIdFor('a:b')].sort());
  });

  it('a second publish of the same id is dropped while the first job is retained (idempotent publish)', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('idem');
    const producer = track(new BullmqProducer(settings));
    await producer.publish([makeRequest(model, 'same', 1), makeRequest(model, 'same', 1)]);
    await producer.publish(makeRequest(model, 'same', 1));
    const t = track(new BullmqTransport(settings));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    await inbox.waitFor(1, 10_000);
    expect(await inbox.quietFor(1_000)).toEqual([]);
    expect(inbox.all.map(idOf)).toEqual(['same']);
  });

  it('an id published again once its earlier job is gone is answered again, although the earlier reply is still retained', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('reused-id');
    const replyTo = `${model}.out`;
    const producer = track(new BullmqProducer(settings));
    const sink = new ResultSink();
    await producer.subscribeReplies(replyTo, sink.onResult);
    const t = track(new BullmqTransport(settings));
    await t.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void t.settle(ds.map(outcomeFor)) });
    await producer.publish(makeRequest(model, 'again', 0, { replyTo }));
    await sink.waitFor(1, 10_000);
    // The request job leaves its queue's retention (KEEP_COMPLETED: 10,000 later jobs or an hour)
    // while its reply, on a quieter queue, is still retained.
    const requests = new Queue(`${model}.requests`, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
    try {
      const deadline = Date.now() + 5_000;
      while ((await requests.getJobState('again')) !== 'completed' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      await requests.remove('again');
    } finally {
      await requests.close();
    }
    await producer.publish(makeRequest(model, 'again', 0, { replyTo }));
    const results = await sink.waitFor(2, 10_000);
    expect(results.map((r) => r.id)).toEqual(['again', 'again']);
  });

  it('results nobody took from the default reply queue are removed after replyTtlMs; DLQ records stay with dlqTtlMs 0', async () => {
    const settings = bullmqSettings({ replyTtlMs: 1_000, dlqTtlMs: 0 });
    const model = uniqueName('ttl');
    const producer = track(new BullmqProducer(settings));
    await producer.publish([makeRequest(model, 'old', 0)]);
    await producer.publishRaw([{ model, body: { not: 'a request' }, priority: 0, key: 'garbage' }]);
    const t = track(new BullmqTransport(settings));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    await t.settle((await inbox.waitFor(2, 30_000)).map(outcomeFor));
    // The result of 'old' and the invalid result of the garbage job.
    expect((await queueJobs(settings, `${model}.replies`, ['wait'])).map((j) => j.data.status).sort()).toEqual(['invalid', 'ok']);
    await new Promise((r) => setTimeout(r, 1_200));
    await producer.publish([makeRequest(model, 'fresh', 0)]);
    await t.settle(await inbox.waitFor(3, 30_000).then((ds) => ds.slice(2).map(outcomeFor)));
    // The sweep runs every half TTL: within a second everything older than the TTL is gone.
    const deadline = Date.now() + 5_000;
    let waiting = await queueJobs(settings, `${model}.replies`, ['wait']);
    while (waiting.length > 1 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      waiting = await queueJobs(settings, `${model}.replies`, ['wait']);
    }
    expect(waiting.map((j) => j.data.id)).toEqual(['fresh']);
    expect(await queueJobs(settings, `${model}.dlq`, ['wait'])).toHaveLength(1);
  });

  it('a job BullMQ gives up on after its workers died holding it is answered: failed WORKER_CRASHED, a DLQ record, and replay brings it back', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('stalled-out');
    const producer = track(new BullmqProducer(settings));
    const sink = new ResultSink();
    await producer.subscribeReplies(`${model}.replies`, sink.onResult, { fromBeginning: true });
    await producer.publish(makeRequest(model, 'crashy', 1));
    // maxStalledCount 0: the first worker death while holding the job fails it for good.
    const options = { stalledIntervalMs: 500, maxStalledCount: 0, reaperIntervalMs: 300 };
    const a = track(new BullmqTransport(settings, options));
    const inboxA = new Inbox();
    await startWith(a, model, inboxA);
    await inboxA.waitFor(1, 10_000);
    await a.abort();

    // Two workers sweep: one of them answers.
    const answered: string[] = [];
    const startAnswering = (t: BullmqTransport, inbox: Inbox): Promise<void> =>
      t.start({ subscriptions: [{ model, priorityLevels: 3 }], onDeliveries: inbox.onDeliveries, onAnswered: (m, reason) => answered.push(`${m} ${reason}`) });
    const b = track(new BullmqTransport(settings, options));
    const inboxB = new Inbox();
    await startAnswering(b, inboxB);
    const c2 = track(new BullmqTransport(settings, options));
    const inboxC = new Inbox();
    await startAnswering(c2, inboxC);
    const [answer] = await sink.waitFor(1, 30_000);
    expect(answer).toMatchObject({ id: 'crashy', model, status: 'failed', error: { code: 'WORKER_CRASHED' } });
    expect(answer?.error?.message).toMatch(/its worker died while holding it 1 time\(s\).*replay it once the cause is fixed/);
    const dl = track(new BullmqDeadLetters(settings));
    const listing = await dl.list({ model });
    expect(listing.byReason).toEqual({ WORKER_CRASHED: 1 });
    expect(listing.letters[0]).toMatchObject({ requestId: 'crashy', priority: 1 });
    expect(await queueJobs(settings, `${model}.requests`, ['failed'])).toEqual([]);
    // Answered once, although b and c2 sweep again and again meanwhile.
    expect(await inboxB.quietFor(1_500)).toEqual([]);
    expect(sink.results).toHaveLength(1);
    expect((await dl.list({ model })).scanned).toBe(1);
    // The worker whose transport answered counts it (npu_fleet_dlq_total, requests by status).
    expect(answered).toEqual([`${model} WORKER_CRASHED`]);

    expect((await dl.replay({ model })).replayed).toBe(1);
    const deadline = Date.now() + 10_000;
    while (inboxB.all.length + inboxC.all.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const [again] = [...inboxB.all, ...inboxC.all];
    expect(idOf(again!)).toBe('crashy');
    await (inboxB.all.length > 0 ? b : c2).settle([outcomeFor(again!)]);
    const results = await sink.waitFor(2, 10_000);
    expect(results.map((r) => r.status)).toEqual(['failed', 'ok']);
  });

  it('close() returns within about connectTimeoutMs when Redis went away while it held jobs; they come back once Redis does', async () => {
    const base = bullmqSettings({ lockDurationMs: 1_000 });
    const late = await lateRedis(base.redisUrl);
    track(late);
    await late.up();
    const model = uniqueName('outage-close');
    const producer = track(new BullmqProducer(base));
    await producer.publish([makeRequest(model, 'held-1', 0), makeRequest(model, 'held-2', 0)]);
    const t = new BullmqTransport({ ...base, redisUrl: late.url, connectTimeoutMs: 1_000 }, { stalledIntervalMs: 500, reaperIntervalMs: 200 });
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    await inbox.waitFor(2, 10_000);
    await late.close();
    const startedAt = Date.now();
    const closed = await Promise.race([t.close().then(() => 'closed'), new Promise((r) => setTimeout(() => r('hung'), 10_000))]);
    expect(closed).toBe('closed');
    expect(Date.now() - startedAt).toBeLessThan(10_000);
    // Not lost: another worker runs them once their locks lapse.
    const other = track(new BullmqTransport(base, { stalledIntervalMs: 500 }));
    const again = new Inbox();
    await startWith(other, model, again);
    expect((await again.waitFor(2, 15_000)).map(idOf).sort()).toEqual(['held-1', 'held-2']);
  }, 40_000);

  it('close() returns within about connectTimeoutMs when Redis went away while it held nothing', async () => {
    const base = bullmqSettings();
    const late = await lateRedis(base.redisUrl);
    track(late);
    await late.up();
    const t = new BullmqTransport({ ...base, redisUrl: late.url, connectTimeoutMs: 1_000 });
    await startWith(t, uniqueName('outage-idle'), new Inbox());
    await late.close();
    const closed = await Promise.race([t.close().then(() => 'closed'), new Promise((r) => setTimeout(() => r('hung'), 10_000))]);
    expect(closed).toBe('closed');
  });
});
