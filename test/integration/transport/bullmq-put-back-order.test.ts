// Jobs the transport hands back to Redis keep their place within their priority (docs/delivery.md:
// "BullMQ takes jobs FIFO within a priority"). The ids run against the alphabet (z-first is added
// first): BullMQ's own moveToWait put every job back at one score, so Redis ordered them by id.
import { Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import type { BullmqSettings } from '../../../src/contracts/fleet-config.ts';
import { uniqueName } from '../../helpers/services.ts';
import { idOf, Inbox, makeRequest, sleep, startWith } from './conformance-kit.ts';
import { bullmqSettings, servedOrder } from './bullmq-harness.ts';
import { putBack } from '../../../src/transport/bullmq/put-back.ts';

const track = closeAfterEach();
const FIRST_THREE = ['z-first', 'y-second', 'x-third'];
const IN_ORDER = [...FIRST_THREE, 'w-fourth'];

/** A model whose queue holds z-first, y-second, x-third at priority 1, added in that order. */
async function queued(settings: BullmqSettings, name: string): Promise<{ model: string; queue: string; producer: BullmqProducer }> {
  const model = uniqueName(name);
  const producer = track(new BullmqProducer(settings));
  // A millisecond apart: the order key starts with the job's add time in ms, and jobs added (and
  // then fetched) in the same millisecond have no order of their own to be put back by.
  for (const id of FIRST_THREE) {
    await producer.publish(makeRequest(model, id, 1));
    await sleep(2);
  }
  return { model, queue: `${model}.requests`, producer };
}

/** Waits until no job of `queue` is active (put back, or taken by nobody). */
async function noneActive(settings: BullmqSettings, queue: string, timeoutMs: number): Promise<void> {
  const admin = new Redis(settings.redisUrl);
  try {
    const deadline = Date.now() + timeoutMs;
    while ((await admin.llen(`${settings.prefix}:${queue}:active`)) > 0) {
      if (Date.now() > deadline) throw new Error(`jobs of ${queue} still active after ${timeoutMs} ms`);
      await sleep(50);
    }
  } finally {
    admin.disconnect();
  }
}

describe('bullmq put-back order within a priority', () => {
  it('jobs held at close are put back in their place: served z-first, y-second, x-third, then a job added after', async () => {
    const settings = bullmqSettings();
    const { model, queue, producer } = await queued(settings, 'order-close');
    const t = track(new BullmqTransport(settings));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    expect((await inbox.waitFor(3, 10_000)).map(idOf)).toEqual(FIRST_THREE);
    await t.close();
    await producer.publish(makeRequest(model, 'w-fourth', 1));
    expect(await servedOrder(settings, queue, 5)).toEqual(IN_ORDER);
  });

  it('jobs released one call each, newest first (backpressure), go back in their place, not behind each other', async () => {
    const settings = bullmqSettings();
    const { model, queue, producer } = await queued(settings, 'order-release');
    const t = track(new BullmqTransport(settings));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const held = await inbox.waitFor(3, 10_000);
    // Intake off for all priorities, so what is released stays in the queue to be looked at.
    t.pause(model, [0, 1, 2]);
    await sleep(300);
    for (const d of [...held].reverse()) await t.release([d]);
    await producer.publish(makeRequest(model, 'w-fourth', 1));
    expect(await servedOrder(settings, queue, 5)).toEqual(IN_ORDER);
  });

  it('a job of a paused priority fetched anyway goes back behind an earlier job another worker held meanwhile', async () => {
    const settings = bullmqSettings();
    const { model, queue, producer } = await queued(settings, 'order-paused');
    // One worker holds z-first (prefetch 1: nothing more)...
    const holder = track(new BullmqTransport(settings, { prefetch: 1 }));
    const holderInbox = new Inbox();
    await startWith(holder, model, holderInbox);
    expect((await holderInbox.waitFor(1, 10_000)).map(idOf)).toEqual(['z-first']);
    // ...while another, priority 1 paused, fetches y-second (the next job) and puts it back.
    const bouncer = track(new BullmqTransport(settings, { pausedPollMs: 100 }));
    const bouncerInbox = new Inbox();
    bouncer.pause(model, [1]);
    await startWith(bouncer, model, bouncerInbox);
    bouncer.pause(model, [1]);
    const admin = new Redis(settings.redisUrl);
    try {
      const deadline = Date.now() + 10_000;
      const bounced = async (): Promise<boolean> =>
        (await admin.xrange(`${settings.prefix}:${queue}:events`, '-', '+')).some(([, f]) => f.includes('waiting') && f.includes('active') && f.includes('y-second'));
      while (!(await bounced())) {
        if (Date.now() > deadline) throw new Error('y-second was never fetched and put back');
        await sleep(50);
      }
    } finally {
      admin.disconnect();
    }
    await bouncer.close();
    await holder.close();
    expect(bouncerInbox.all).toHaveLength(0);
    await producer.publish(makeRequest(model, 'w-fourth', 1));
    expect(await servedOrder(settings, queue, 5)).toEqual(IN_ORDER);
  }, 30_000);

  it('jobs whose fetch a lost connection cut off are put back in their place', async () => {
    // A 60 s lock: only the reclaim brings them back within the test.
    const settings = bullmqSettings({ lockDurationMs: 60_000 });
    const { model, queue, producer } = await queued(settings, 'order-reclaim');
    const t = track(new BullmqTransport(settings));
    const inbox = new Inbox();
    // Intake paused throughout: the reclaim still runs, and the jobs it puts back stay queued.
    t.pause(model, [0, 1, 2]);
    await startWith(t, model, inbox);
    t.pause(model, [0, 1, 2]);
    await sleep(300);
    const workerId = (t as unknown as { workers: Map<string, { worker: { id: string } }> }).workers.get(model)!.worker.id;
    const admin = new Redis(settings.redisUrl);
    const raw = new Worker(queue, null, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
    try {
      // The cut-off fetches: active under this worker's locks, the replies never reached it.
      expect((await raw.getNextJob(`${workerId}:lost-1`))?.id).toBe('z-first');
      expect((await raw.getNextJob(`${workerId}:lost-2`))?.id).toBe('y-second');
      const list = String(await admin.call('CLIENT', 'LIST')).split('\n');
      const ids = list.filter((l) => l.includes(`name=npu-fleet:${settings.prefix}:${queue}`)).map((l) => /id=(\d+)/.exec(l)?.[1]);
      expect(ids.length).toBeGreaterThan(0);
      for (const id of ids) await admin.call('CLIENT', 'KILL', 'ID', id as string);
      await noneActive(settings, queue, 15_000);
    } finally {
      await raw.close(true);
      admin.disconnect();
    }
    await t.close();
    expect(inbox.all).toHaveLength(0);
    await producer.publish(makeRequest(model, 'w-fourth', 1));
    expect(await servedOrder(settings, queue, 5)).toEqual(IN_ORDER);
  }, 40_000);

  it("jobs a crashed worker held, put back by BullMQ's stalled check, go to their place, not ahead of every priority", async () => {
    const settings = bullmqSettings({ lockDurationMs: 1_000 });
    const { model, queue, producer } = await queued(settings, 'order-stalled');
    const crashed = new BullmqTransport(settings, { prefetch: 3, stalledIntervalMs: 500 });
    const crashedInbox = new Inbox();
    await startWith(crashed, model, crashedInbox);
    expect((await crashedInbox.waitFor(3, 10_000)).map(idOf)).toEqual(FIRST_THREE);
    // The worker left to run the stalled check holds one job (prefetch 1), so it fetches nothing
    // more and the queue stays to be looked at; a paused worker would not check for stalls.
    await producer.publish(makeRequest(model, 'blocker', 0));
    const checker = track(new BullmqTransport(settings, { prefetch: 1, stalledIntervalMs: 500 }));
    const checkerInbox = new Inbox();
    await startWith(checker, model, checkerInbox);
    expect((await checkerInbox.waitFor(1, 10_000)).map(idOf)).toEqual(['blocker']);
    await producer.publish([makeRequest(model, 'urgent', 0), makeRequest(model, 'w-fourth', 1)]);
    await crashed.abort();
    const admin = new Redis(settings.redisUrl);
    try {
      const deadline = Date.now() + 15_000;
      while ((await admin.lrange(`${settings.prefix}:${queue}:active`, 0, -1)).join() !== 'blocker') {
        if (Date.now() > deadline) throw new Error("the crashed worker's jobs were not put back by the stalled check");
        await sleep(50);
      }
    } finally {
      admin.disconnect();
    }
    await sleep(500);
    await checker.close();
    expect(checkerInbox.all).toHaveLength(1);
    const served = await servedOrder(settings, queue, 7);
    expect(served).toEqual(['blocker', 'urgent', ...IN_ORDER]);
  }, 40_000);

  it('40 jobs put back each just ahead of the one before (no double left between two scores) and one BullMQ put back itself keep their order', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('order-dense');
    const queue = `${model}.requests`;
    const producer = track(new BullmqProducer(settings));
    // Ids against the alphabet again: j-39 is added first.
    const ids = Array.from({ length: 40 }, (_, i) => `j-${String(39 - i).padStart(2, '0')}`);
    await producer.publish(ids.map((id) => makeRequest(model, id, 1)));
    const redis = new Redis(settings.redisUrl);
    const raw = new Worker(queue, null, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
    try {
      const fetched = [];
      for (let i = 0; i < ids.length; i++) fetched.push({ job: (await raw.getNextJob(`t:${i}`))!, token: `t:${i}`, seq: i });
      expect(fetched.map((f) => f.job.id)).toEqual(ids);
      // The first through BullMQ (its one score for every put-back), then the last, then each
      // next one just ahead of the one before: halving the same gap until no double is left.
      const [first, ...rest] = fetched;
      await first!.job.moveToWait(first!.token);
      for (const f of rest.reverse()) await putBack(redis, settings.prefix, f.job, f.token, f.seq);
      const scores = (await redis.zrange(`${settings.prefix}:${queue}:prioritized`, 0, -1, 'WITHSCORES')).filter((_, i) => i % 2 === 1).map(Number);
      // All in the front band of BullMQ priority 2, ahead of any counter score (2 x 2^32 + 1 on).
      for (const score of scores) expect(score >= 2 * 2 ** 32 && score < 2 * 2 ** 32 + 1).toBe(true);
      expect(new Set(scores).size).toBe(ids.length);
      // The band was spaced out again (the one BullMQ put back at 2 x 2^32 moved with it).
      expect(scores).not.toContain(2 * 2 ** 32);
    } finally {
      await raw.close(true);
      redis.disconnect();
    }
    await producer.publish(makeRequest(model, 'a-last', 1));
    expect(await servedOrder(settings, queue, 42)).toEqual([...ids, 'a-last']);
  });

  it('60 jobs put back in a scattered order (the i x 17 mod 60th each time) are served in the order they were added', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('order-scattered');
    const queue = `${model}.requests`;
    const producer = track(new BullmqProducer(settings));
    const ids = Array.from({ length: 60 }, (_, i) => `s-${String(59 - i).padStart(2, '0')}`);
    await producer.publish(ids.map((id) => makeRequest(model, id, 2)));
    const redis = new Redis(settings.redisUrl);
    const raw = new Worker(queue, null, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
    try {
      const fetched = [];
      for (let i = 0; i < ids.length; i++) fetched.push({ job: (await raw.getNextJob(`t:${i}`))!, token: `t:${i}`, seq: i });
      for (let i = 0; i < ids.length; i++) {
        const f = fetched[(i * 17) % ids.length]!;
        await putBack(redis, settings.prefix, f.job, f.token, f.seq);
      }
    } finally {
      await raw.close(true);
      redis.disconnect();
    }
    expect(await servedOrder(settings, queue, 61)).toEqual(ids);
  });
});
