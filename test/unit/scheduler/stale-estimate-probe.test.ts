import { describe, expect, it } from 'vitest';
import { BatchScheduler } from '../../../src/scheduler/index.ts';
import { ManualClock, ids, req } from './scheduler-fixtures.ts';

const options = { priorityLevels: 3, maxQueueDelayMs: [0, 5, 20], agingMs: null, gears: [1, 2, 4, 8], maxBatchSize: 8 };
/** The real device: 1 ms + 0.5 ms per slot. */
const trueMs = (gear: number) => 1 + 0.5 * gear;

/**
 * One request every 2 ms, each due 100 ms after it arrives, on a device driven the way the worker
 * drives it (decide when idle, record each batch's device time when it ends); returns how many
 * requests were dispatched and expired per second of the run.
 */
function run(s: BatchScheduler<string>, seconds: number): Array<{ dispatched: number; expired: number }> {
  const clock = new ManualClock(0);
  const perSecond = Array.from({ length: seconds }, () => ({ dispatched: 0, expired: 0 }));
  let freeAt = 0;
  let running: { gear: number; doneAt: number } | undefined;
  for (let i = 0; clock.nowMs < seconds * 1000; i++, clock.advance(1)) {
    const bin = perSecond[Math.floor(clock.nowMs / 1000)] as { dispatched: number; expired: number };
    if (running !== undefined && clock.nowMs >= running.doneAt) {
      s.recordCompletion(running.gear, trueMs(running.gear), clock.nowMs);
      running = undefined;
    }
    if (i % 2 === 0) s.enqueue(req({ id: `r${i}`, items: 1, at: clock.nowMs, deadlineAt: clock.nowMs + 100 }));
    const d = running === undefined ? s.decide(clock.nowMs) : { kind: 'busy' as const, expired: s.collectExpired(clock.nowMs, freeAt) };
    bin.expired += d.expired.length;
    if (d.kind === 'dispatch') {
      bin.dispatched += d.batch.members.length;
      freeAt = clock.nowMs + trueMs(d.batch.gear);
      running = { gear: d.batch.gear, doneAt: freeAt };
    }
  }
  return perSecond;
}

describe('a stale device-time estimate is measured again instead of expiring its traffic for good', () => {
  it('after one 800 ms warm-up batch, 100 ms-deadline traffic is served again within seconds (it was expired for ever)', () => {
    const s = new BatchScheduler<string>(options);
    s.recordCompletion(8, 800, 0); // a slow first execution (warm-up) sets every gear's level
    const bins = run(s, 20);
    const last = bins.slice(-5);
    const dispatched = last.reduce((n, b) => n + b.dispatched, 0);
    const expired = last.reduce((n, b) => n + b.expired, 0);
    expect(dispatched).toBeGreaterThan(0.99 * (dispatched + expired));
    expect(dispatched).toBeGreaterThan(2000);
  });

  it('cold start: traffic the prior alone rules out is probed on an idle device, not expired for ever', () => {
    // The prior says gear 1 takes 5.5 ms; the device takes 1.5 ms; every request is due 4 ms after
    // it arrives. Without a probe no batch ever runs, so the prior is never corrected. It is
    // trusted for estimateTrustMs (5 s) from the first decide, as a sample would be.
    const s = new BatchScheduler<string>({ ...options, gears: [1], maxBatchSize: 1 });
    const clock = new ManualClock(0);
    let freeAt = 0;
    let running: { gear: number; doneAt: number } | undefined;
    let dispatched = 0;
    let expired = 0;
    for (let i = 0; clock.nowMs < 10_000; i++, clock.advance(1)) {
      if (running !== undefined && clock.nowMs >= running.doneAt) {
        s.recordCompletion(running.gear, trueMs(running.gear), clock.nowMs);
        running = undefined;
      }
      if (i % 2 === 0) s.enqueue(req({ id: `r${i}`, items: 1, at: clock.nowMs, deadlineAt: clock.nowMs + 4 }));
      const d = running === undefined ? s.decide(clock.nowMs) : { kind: 'busy' as const, expired: s.collectExpired(clock.nowMs, freeAt) };
      if (clock.nowMs >= 7000) expired += d.expired.length;
      if (d.kind === 'dispatch') {
        if (clock.nowMs >= 7000) dispatched += d.batch.members.length;
        freeAt = clock.nowMs + trueMs(d.batch.gear);
        running = { gear: d.batch.gear, doneAt: freeAt };
      }
    }
    expect(dispatched).toBeGreaterThan(0.99 * (dispatched + expired));
    expect(dispatched).toBeGreaterThan(1000);
  });

  it('after an 800 ms warm-up batch, traffic of that very gear is served again within one probe, not ten', () => {
    const s = new BatchScheduler<string>(options);
    s.recordCompletion(8, 800, 0); // the model's first execution, a warm-up, in gear 8
    const clock = new ManualClock(0);
    let running: { gear: number; doneAt: number } | undefined;
    let freeAt = 0;
    let dispatched = 0;
    let expired = 0;
    // A request of 8 samples every 20 ms, due 100 ms after it arrives: gear 8 or nothing.
    for (let i = 0; clock.nowMs < 15_000; i++, clock.advance(1)) {
      if (running !== undefined && clock.nowMs >= running.doneAt) {
        s.recordCompletion(running.gear, trueMs(running.gear), clock.nowMs);
        running = undefined;
      }
      if (i % 20 === 0) s.enqueue(req({ id: `r${i}`, items: 8, at: clock.nowMs, deadlineAt: clock.nowMs + 100 }));
      const d = running === undefined ? s.decide(clock.nowMs) : { kind: 'busy' as const, expired: s.collectExpired(clock.nowMs, freeAt) };
      if (clock.nowMs >= 10_000) expired += d.expired.length;
      if (d.kind === 'dispatch') {
        if (clock.nowMs >= 10_000) dispatched += d.batch.members.length;
        freeAt = clock.nowMs + trueMs(d.batch.gear);
        running = { gear: d.batch.gear, doneAt: freeAt };
      }
    }
    // The probe's fresh sample restarts the stale estimate (it was blended in at 20%: 800, 642,
    // 515, ... ms, one probe per 5 s, 50 s of expired traffic).
    expect(dispatched).toBeGreaterThan(0.99 * (dispatched + expired));
    expect(dispatched).toBeGreaterThan(240);
  });

  it('estimatesStale (a new model version took over): estimates stay, but are stale at once', () => {
    const s = new BatchScheduler<string>({ ...options, gears: [1], maxBatchSize: 1 });
    const clock = new ManualClock(0);
    for (let i = 0; i < 10; i++) s.recordCompletion(1, 500, clock.advance(10)); // the old version: 500 ms
    s.enqueue(req({ id: 'old', items: 1, at: clock.nowMs, deadlineAt: clock.nowMs + 100 }));
    expect(ids(s.decide(clock.nowMs).expired)).toEqual(['old']);
    s.estimatesStale();
    expect(s.estimateDeviceMs(1)).toBe(500); // still the best guess
    s.enqueue(req({ id: 'new', items: 1, at: clock.advance(1000), deadlineAt: clock.nowMs + 100 }));
    const d = s.decide(clock.nowMs);
    expect(d.kind === 'dispatch' && { members: ids(d.batch.members), probe: d.batch.probe }).toEqual({ members: ['new'], probe: true });
    // Its first sample replaces the old version's estimate rather than moving it 20% of the way.
    s.recordCompletion(1, 2, clock.advance(2));
    expect(s.estimateDeviceMs(1)).toBe(2);
  });

  it('a probe does not grow a batch that meets its deadlines by the estimate into a gear that misses them', () => {
    const s = new BatchScheduler<string>(options);
    const clock = new ManualClock(0);
    // Gears 1 and 2 run all the time (1.5 and 2 ms); gears 4 and 8 were last measured long ago.
    s.recordCompletion(4, 3, clock.nowMs);
    s.recordCompletion(8, 5, clock.nowMs);
    clock.advance(10_000);
    for (let i = 0; i < 10; i++) for (const g of [1, 2]) s.recordCompletion(g, trueMs(g), clock.advance(1));
    // 'a' is due in 2.5 ms: gear 2 (2 ms) serves it in time, gear 4 (3 ms, stale) would not.
    s.enqueue(req({ id: 'a', items: 1, at: clock.nowMs, deadlineAt: clock.nowMs + 2.5 }));
    for (const id of ['b', 'c', 'd']) s.enqueue(req({ id, items: 1, at: clock.nowMs, deadlineAt: clock.nowMs + 100 }));
    const d = s.decide(clock.nowMs);
    expect(d.kind === 'dispatch' && { members: ids(d.batch.members), gear: d.batch.gear, probe: d.batch.probe }).toEqual({ members: ['a', 'b'], gear: 2, probe: false });
  });

  it('a fresh estimate still expires what it rules out: no probe while that gear keeps running', () => {
    const s = new BatchScheduler<string>({ ...options, gears: [1], maxBatchSize: 1 });
    // The device really takes 150 ms a request: every 100 ms deadline is out of reach.
    const clock = new ManualClock(0);
    for (let i = 0; i < 10; i++) s.recordCompletion(1, 150, clock.advance(100));
    s.enqueue(req({ id: 'late', items: 1, at: clock.nowMs, deadlineAt: clock.nowMs + 100 }));
    const d = s.decide(clock.nowMs);
    expect(d.kind).toBe('idle');
    expect(d.expired.map((r) => r.id)).toEqual(['late']);
  });

  it('a stale estimate lets one batch through per probeIntervalMs, only on an idle device', () => {
    const s = new BatchScheduler<string>({ ...options, gears: [1], maxBatchSize: 1, probeIntervalMs: 1000, estimateTrustMs: 5000 });
    const clock = new ManualClock(0);
    s.recordCompletion(1, 150, clock.nowMs);
    clock.advance(6000); // stale now
    const at = (id: string) => req({ id, items: 1, at: clock.nowMs, deadlineAt: clock.nowMs + 100 });
    s.enqueue(at('busy'));
    expect(s.decide(clock.nowMs, clock.nowMs + 10).expired.map((r) => r.id)).toEqual(['busy']);
    s.enqueue(at('probe'));
    const probe = s.decide(clock.nowMs);
    expect(probe.kind === 'dispatch' && probe.batch.members.map((r) => r.id)).toEqual(['probe']);
    clock.advance(500);
    s.enqueue(at('next'));
    expect(s.decide(clock.nowMs).expired.map((r) => r.id)).toEqual(['next']);
    clock.advance(600);
    s.enqueue(at('again'));
    const again = s.decide(clock.nowMs);
    expect(again.kind === 'dispatch' && again.batch.members.map((r) => r.id)).toEqual(['again']);
  });
});
