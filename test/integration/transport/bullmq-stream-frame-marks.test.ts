// The claim script that keeps a camera's ok results in frame order across BullMQ workers
// (StreamFrameMarks, stream-frame-marks.ts), on real Redis: which frames it claims and which it
// refuses, how a claim waits for another settle of its stream to publish, how long marks last, and
// what a Redis that does not answer leaves (ok, unchecked).
import type { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { SERVED_FRAME_MEMORY_MS } from '../../../src/scheduler/stream-served.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { redisConnection } from '../../../src/transport/bullmq/redis-connection.ts';
import { FRAME_CLAIM_TIMEOUT_MS, parseMarks, StreamFrameMarks } from '../../../src/transport/bullmq/stream-frame-marks.ts';
import type { AnsweredFrame } from '../../../src/transport/transport.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { bullmqSettings } from './bullmq-harness.ts';
import { Inbox, startWith } from './conformance-kit.ts';

const connections: Redis[] = [];
afterEach(() => {
  for (const c of connections.splice(0)) c.disconnect();
});

function connect(): Redis {
  const c = redisConnection(getServices().redisUrl);
  connections.push(c);
  return c;
}

/** Marks of one test's own keys; `warns` collects what it logs. */
function marks(o: { prefix?: string; redis?: Redis; timeoutMs?: number; holdMaxMs?: number; warns?: string[] } = {}): { m: StreamFrameMarks; prefix: string; redis: Redis } {
  const prefix = o.prefix ?? uniqueName('marks');
  const redis = o.redis ?? connect();
  const warns = o.warns ?? [];
  const logger = { error: () => {}, info: () => {}, debug: () => {}, warn: (_: object, msg: string) => void warns.push(msg) };
  const m = new StreamFrameMarks({ redis: async () => redis, key: (model, stream, kind) => `${prefix}:${model}:${kind}:${stream}`, logger, ...(o.timeoutMs === undefined ? {} : { timeoutMs: o.timeoutMs }), ...(o.holdMaxMs === undefined ? {} : { holdMaxMs: o.holdMaxMs }) });
  return { m, prefix, redis };
}

const frame = (streamKey: string, frameAt: number, requestId = `${streamKey}~${frameAt}`, model = 'm'): AnsweredFrame => ({ model, requestId, streamKey, frameAt });
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('StreamFrameMarks: a stream\'s newest claimed frame, fleet-wide', () => {
  it('claims a newer frame or a tie, refuses an older one naming the newer, per stream and per model', async () => {
    const { m } = marks();
    const first = await m.claim([frame('cam1', 1_000), frame('cam2', 5_000)]);
    expect(first.newer).toEqual([undefined, undefined]);
    first.release();
    const second = await m.claim([frame('cam1', 999), frame('cam1', 1_000, 'again'), frame('cam2', 5_001), frame('cam1', 999, 'x', 'other-model')]);
    second.release();
    expect(second.newer).toEqual([{ requestId: 'cam1~1000', frameAt: 1_000 }, undefined, undefined, undefined]);
    // The tie was claimed: the mark names it now.
    const third = await m.claim([frame('cam1', 500)]);
    third.release();
    expect(third.newer).toEqual([{ requestId: 'again', frameAt: 1_000 }]);
  });

  it('takes the frames of one call in order: a later older frame of a stream is refused by an earlier newer one', async () => {
    const { m } = marks();
    const c = await m.claim([frame('cam', 20), frame('cam', 10), frame('cam', 30)]);
    c.release();
    expect(c.newer).toEqual([undefined, { requestId: 'cam~20', frameAt: 20 }, undefined]);
  });

  it('a request id with spaces and a fractional frame time come back whole', async () => {
    const { m } = marks();
    (await m.claim([frame('cam', 10.5, 'id with spaces')])).release();
    expect((await m.claim([frame('cam', 10)])).newer).toEqual([{ requestId: 'id with spaces', frameAt: 10.5 }]);
  });

  it('a newer frame waits until the settle holding its stream releases it; an older one is refused at once', async () => {
    const { m } = marks();
    const held = await m.claim([frame('cam', 100)]);
    expect(held.newer).toEqual([undefined]);
    const older = await m.claim([frame('cam', 50)]);
    expect(older.newer).toEqual([{ requestId: 'cam~100', frameAt: 100 }]);
    older.release();
    let claimedAt = 0;
    const newer = m.claim([frame('cam', 200), frame('other-cam', 1)]).then((c) => ((claimedAt = Date.now()), c));
    await sleep(100);
    expect(claimedAt, 'claimed while the stream was held').toBe(0);
    const releasedAt = Date.now();
    held.release();
    const c = await newer;
    expect(c.newer).toEqual([undefined, undefined]);
    expect(claimedAt).toBeGreaterThanOrEqual(releasedAt);
    expect(claimedAt - releasedAt).toBeLessThan(200);
    c.release();
  });

  it('a live holder publishing slower than a lease lasts keeps its stream: a newer frame waits for its release', { timeout: 20_000 }, async () => {
    // The QA case: on a host at load 10-12 a settle's publish took over FRAME_CLAIM_TIMEOUT_MS, its
    // lease lapsed, another worker's newer frame took the stream over and went out first.
    const a = marks();
    const b = marks({ prefix: a.prefix });
    const held = await a.m.claim([frame('cam', 4)]);
    expect(held.newer).toEqual([undefined]);
    let claimedAt = 0;
    const newer = b.m.claim([frame('cam', 5)]).then((c) => ((claimedAt = Date.now()), c));
    await sleep(2_500);
    expect(claimedAt, 'the newer frame took the stream over from a live holder').toBe(0);
    expect(await a.redis.pttl(`${a.prefix}:m:lease:cam`), 'the holder\'s lease is kept alive').toBeGreaterThan(0);
    const releasedAt = Date.now();
    held.release();
    const c = await newer;
    expect(c.newer).toEqual([undefined]);
    expect(claimedAt).toBeGreaterThanOrEqual(releasedAt);
    expect(claimedAt - releasedAt).toBeLessThan(300);
    c.release();
    expect(await a.redis.get(`${a.prefix}:m:mark:cam`)).toBe('5 cam~5');
  });

  it('a holder killed mid-settle (no release, no more renewals) is taken over a lease\'s life after its last renewal', { timeout: 20_000 }, async () => {
    const warns: string[] = [];
    const a = marks({ warns });
    const b = marks({ prefix: a.prefix });
    const held = await a.m.claim([frame('cam', 100)]);
    let claimedAt = 0;
    const newer = b.m.claim([frame('cam', 200)]).then((c) => ((claimedAt = Date.now()), c));
    await sleep(1_500);
    expect(claimedAt, 'taken over while its holder lived').toBe(0);
    // Killed: its connection gone, its renewals fail.
    a.redis.disconnect();
    const killedAt = Date.now();
    const c = await newer;
    expect(c.newer).toEqual([undefined]);
    expect(claimedAt - killedAt).toBeLessThan(FRAME_CLAIM_TIMEOUT_MS + 500);
    expect(await b.redis.get(`${a.prefix}:m:mark:cam`)).toBe('200 cam~200');
    c.release();
    held.release();
    // A failed renewal is logged, not thrown.
    for (const end = Date.now() + 2_000; warns.length === 0 && Date.now() < end; ) await sleep(10);
    expect(warns[0]).toMatch(/renew/);
  });

  it('a holder that keeps renewing but never releases is taken over past the hold bound, logged', { timeout: 20_000 }, async () => {
    const warns: string[] = [];
    const heldWarns: string[] = [];
    const a = marks({ timeoutMs: 300, warns: heldWarns });
    const b = marks({ prefix: a.prefix, timeoutMs: 300, holdMaxMs: 1_500, warns });
    const held = await a.m.claim([frame('cam', 100)]); // stuck: never released
    const started = Date.now();
    const c = await b.m.claim([frame('cam', 200)]);
    const waitedMs = Date.now() - started;
    expect(c.newer).toEqual([undefined]);
    expect(waitedMs).toBeGreaterThanOrEqual(1_500);
    expect(waitedMs).toBeLessThan(2_500);
    expect(await b.redis.get(`${a.prefix}:m:mark:cam`)).toBe('200 cam~200');
    expect(warns).toHaveLength(1);
    expect(warns[0]).toMatch(/took a stream over/);
    // The stuck holder's next renewal finds its lease another's: logged, and it renews no more.
    for (const end = Date.now() + 2_000; heldWarns.length === 0 && Date.now() < end; ) await sleep(10);
    expect(heldWarns[0]).toMatch(/renew/);
    c.release();
    held.release();
  });

  it('a holder stops renewing past the hold bound: a settle stuck for good does not keep its streams', { timeout: 20_000 }, async () => {
    const { m, prefix, redis } = marks({ timeoutMs: 300, holdMaxMs: 1_000 });
    const claimedAt = Date.now();
    const held = await m.claim([frame('cam', 100)]); // never released
    await sleep(700);
    expect(await redis.get(`${prefix}:m:lease:cam`), 'renewed past a lease\'s life').not.toBeNull();
    for (const end = Date.now() + 3_000; (await redis.exists(`${prefix}:m:lease:cam`)) === 1 && Date.now() < end; ) await sleep(10);
    const lapsedAt = Date.now();
    expect(await redis.exists(`${prefix}:m:lease:cam`)).toBe(0);
    expect(lapsedAt - claimedAt).toBeGreaterThanOrEqual(1_000);
    expect(lapsedAt - claimedAt).toBeLessThan(1_000 + 300 + 300);
    held.release();
  });

  it('a settle whose frames were all refused holds no lease and renews nothing', { timeout: 20_000 }, async () => {
    const { m, prefix, redis } = marks({ timeoutMs: 300 });
    (await m.claim([frame('cam', 100)])).release();
    let calls = 0;
    const counted = new StreamFrameMarks({ redis: async () => (calls++, redis), key: (model, stream, kind) => `${prefix}:${model}:${kind}:${stream}`, timeoutMs: 300 });
    const refused = await counted.claim([frame('cam', 50), frame('cam', 60)]);
    expect(refused.newer).toEqual([{ requestId: 'cam~100', frameAt: 100 }, { requestId: 'cam~100', frameAt: 100 }]);
    await sleep(500);
    expect(calls, 'Redis calls past the claim').toBe(1);
    refused.release();
    // A claimed frame's lease is renewed meanwhile: every 100 ms here.
    calls = 0;
    const held = await counted.claim([frame('cam', 200)]);
    await sleep(500);
    held.release();
    expect(calls).toBeGreaterThanOrEqual(3);
  });

  it('marks and leases expire: Redis keeps only live streams, and a producer clock set back heals', async () => {
    const { m, prefix, redis } = marks();
    const c = await m.claim([frame('cam', 10_000)]);
    const markTtl = await redis.pttl(`${prefix}:m:mark:cam`);
    expect(markTtl).toBeGreaterThan(SERVED_FRAME_MEMORY_MS - 500);
    expect(markTtl).toBeLessThanOrEqual(SERVED_FRAME_MEMORY_MS);
    expect(await redis.pttl(`${prefix}:m:lease:cam`)).toBeGreaterThan(0);
    c.release();
    for (const end = Date.now() + 2_000; (await redis.exists(`${prefix}:m:lease:cam`)) === 1 && Date.now() < end; ) await sleep(5);
    expect(await redis.exists(`${prefix}:m:lease:cam`)).toBe(0);
    // Refused frames do not extend the mark: past the memory an older clock's frames are claimed.
    expect((await m.claim([frame('cam', 1)])).newer).toEqual([{ requestId: 'cam~10000', frameAt: 10_000 }]);
    await sleep(SERVED_FRAME_MEMORY_MS + 50);
    expect(await redis.exists(`${prefix}:m:mark:cam`)).toBe(0);
    expect((await m.claim([frame('cam', 2)])).newer).toEqual([undefined]);
  });

  it('Redis not answering: every frame claimed (answered ok unchecked), one warning for many', async () => {
    const closed = connect();
    closed.disconnect();
    const warns: string[] = [];
    const { m } = marks({ redis: closed, warns, timeoutMs: 200 });
    for (let i = 0; i < 3; i++) expect((await m.claim([frame('cam', i), frame('cam2', i)])).newer).toEqual([undefined, undefined]);
    expect(warns).toHaveLength(1);
    expect(warns[0]).toMatch(/answering them ok unchecked/);
  });

  it('through the transport: a claim holds the model\'s stream; closed, a claim is unchecked and opens no connection again', async () => {
    const settings = bullmqSettings();
    const t = new BullmqTransport(settings);
    await startWith(t, 'm', new Inbox());
    const held = await t.claimNewestFrames([frame('cam', 10)]);
    expect(held.newer).toEqual([undefined]);
    const redis = connect();
    expect(await redis.get(`${settings.prefix}:${settings.queueTemplate.replace('{model}', 'm')}:npu-fleet-frame-mark:cam`)).toBe('10 cam~10');
    expect((await t.claimNewestFrames([frame('cam', 5)])).newer).toEqual([{ requestId: 'cam~10', frameAt: 10 }]);
    await t.close();
    held.release();
    expect((await t.claimNewestFrames([frame('cam', 1)])).newer).toEqual([undefined]);
    await sleep(50);
    expect((t as unknown as { connection: unknown }).connection).toBeUndefined();
  });

  it('parseMarks reads the script\'s reply and refuses one of another shape', () => {
    expect(parseMarks(['', '12 a b'], 2)).toEqual([undefined, { frameAt: 12, requestId: 'a b' }]);
    expect(() => parseMarks(['', ''], 3)).toThrow(/unexpected reply/);
    expect(() => parseMarks(0, 1)).toThrow(/unexpected reply/);
  });
});
