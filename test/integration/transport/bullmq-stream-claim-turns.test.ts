// One worker's settles claim their stream frames (FrameOrderedSettle in front of the claim script,
// StreamFrameMarks, on real Redis) in the order the worker settles them. A claim that waits for
// another settle's lease on one of its streams changes nothing meanwhile; a later settle of the
// same worker with a newer frame of another of its streams must not claim that stream first, else
// the older frame, served first by this very worker, is answered SUPERSEDED "(on another worker)".
// A one-worker `npu-fleet frames` drill (8 cameras at 50 fps, 40 ms device) saw 0, 17 and 8 such
// frames in 3 runs, the overtaken claims having waited 56-229 ms for a lease.
import type { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { ZERO_TIMINGS, type ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { FrameOrderedSettle } from '../../../src/runtime/frame-ordered-settle.ts';
import { redisConnection } from '../../../src/transport/bullmq/redis-connection.ts';
import { StreamFrameMarks } from '../../../src/transport/bullmq/stream-frame-marks.ts';
import type { AnsweredFrame, Delivery, Outcome, Transport } from '../../../src/transport/transport.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';

const connections: Redis[] = [];
afterEach(() => {
  for (const c of connections.splice(0)) c.disconnect();
});

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

const delivery = (id: string): Delivery => ({ deliveryId: `d-${id}`, model: 'm', priority: 0, body: {}, receivedAt: 0, redelivered: false });
const okResult = (id: string): ResultEnvelope => ({ id, model: 'm', version: '1', status: 'ok', outputs: [], timings: ZERO_TIMINGS, batchSize: 1, gear: 1, device: 0, worker: 'w' });
const frame = (streamKey: string, frameAt: number): AnsweredFrame => ({ model: 'm', requestId: `${streamKey}~${frameAt}`, streamKey, frameAt });

/**
 * A worker's FrameOrderedSettle on the real claim script; its publish (`settle`) records what goes
 * out, in order, and the publish of a settle whose first frame is `hold` waits for `letGo`.
 */
function worker(hold: string, o: { prefix?: string; published?: Array<{ id: string; status: string; message?: string | undefined }> } = {}) {
  const redis = redisConnection(getServices().redisUrl);
  connections.push(redis);
  const prefix = o.prefix ?? uniqueName('claimturns');
  const marks = new StreamFrameMarks({ redis: async () => redis, key: (model, stream, kind) => `${prefix}:${model}:${kind}:${stream}` });
  const published = o.published ?? [];
  let letGo: () => void = () => {};
  const held = new Promise<void>((r) => (letGo = r));
  let holding = false;
  const t: Pick<Transport, 'settle' | 'claimNewestFrames'> = {
    claimNewestFrames: (frames) => marks.claim(frames),
    settle: async (outcomes) => {
      if (outcomes[0]?.result.id === hold) {
        holding = true;
        await held;
      }
      for (const o of outcomes) published.push({ id: o.result.id, status: o.result.status, message: o.result.error?.message });
    },
  };
  const s = new FrameOrderedSettle(t);
  const settle = (frames: readonly AnsweredFrame[]): Promise<void> => {
    const outcomes: Outcome[] = frames.map((f) => ({ delivery: delivery(f.requestId), result: okResult(f.requestId) }));
    outcomes.forEach((o, i) => s.note(o.delivery, frames[i] as AnsweredFrame));
    return s.settle(outcomes);
  };
  return { settle, published, letGo, holding: () => holding };
}

describe('FrameOrderedSettle on the claim script: one worker claims in the order it settles', () => {
  it('a settle waiting for a lease on one stream is not overtaken on another by a later settle of the same worker', { timeout: 20_000 }, async () => {
    const w = worker('x~100');
    // Settle 0 holds camera x while it publishes.
    const s0 = w.settle([frame('x', 100)]);
    for (const end = Date.now() + 5_000; !w.holding() && Date.now() < end; ) await sleep(2);
    expect(w.holding()).toBe(true);
    // Settle 1: a newer frame of x (waits for settle 0) and frame 200 of camera c.
    const s1 = w.settle([frame('x', 200), frame('c', 200)]);
    // Settle 2, later, of the same worker: the next frame of camera c only.
    const s2 = w.settle([frame('c', 300)]);
    await sleep(100);
    w.letGo();
    await Promise.all([s0, s1, s2]);
    const summary = JSON.stringify(w.published);
    // Every frame ok: none of them is older than one this worker had claimed before it.
    expect(w.published.map((p) => `${p.id} ${p.status}`), summary).toEqual(['x~100 ok', 'x~200 ok', 'c~200 ok', 'c~300 ok']);
  });

  it('settles of other streams are not held back by one waiting for a lease', { timeout: 20_000 }, async () => {
    const w = worker('x~100');
    const s0 = w.settle([frame('x', 100)]);
    for (const end = Date.now() + 5_000; !w.holding() && Date.now() < end; ) await sleep(2);
    const s1 = w.settle([frame('x', 200)]);
    const s2 = w.settle([frame('y', 50)]);
    await s2;
    // y went out while x's newer frame still waits for settle 0.
    expect(w.published.map((p) => p.id)).toEqual(['y~50']);
    w.letGo();
    await Promise.all([s0, s1]);
    expect(w.published.map((p) => `${p.id} ${p.status}`)).toEqual(['y~50 ok', 'x~100 ok', 'x~200 ok']);
  });
});

describe('FrameOrderedSettle on the claim script: two workers', () => {
  it('a publish slower than a lease lasts is not overtaken by the other worker\'s newer frame', { timeout: 20_000 }, async () => {
    // A QA `frames` run, 2 workers on a host at load 10-12: out of order 1 in 2 of 4 runs, the
    // holder's lease having lapsed under a publish over 1 s.
    const prefix = uniqueName('claimturns');
    const published: Array<{ id: string; status: string; message?: string | undefined }> = [];
    const a = worker('cam~4', { prefix, published });
    const b = worker('none', { prefix, published });
    const sA = a.settle([frame('cam', 4)]);
    for (const end = Date.now() + 5_000; !a.holding() && Date.now() < end; ) await sleep(2);
    expect(a.holding()).toBe(true);
    const sB = b.settle([frame('cam', 5)]);
    await sleep(2_500);
    a.letGo();
    await Promise.all([sA, sB]);
    expect(published.map((p) => `${p.id} ${p.status}`), JSON.stringify(published)).toEqual(['cam~4 ok', 'cam~5 ok']);
  });
});
