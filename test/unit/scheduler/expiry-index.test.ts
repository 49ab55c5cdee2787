import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BatchScheduler } from '../../../src/scheduler/index.ts';
import type { SchedulerOptionsInput } from '../../../src/scheduler/index.ts';
import { ManualClock, ids, reachMs, req } from './scheduler-fixtures.ts';
import type { ReqSpec } from './scheduler-fixtures.ts';

// Prior device time 10 ms per gear slot (no base): gear 1 = 10 ms, gear 4 = 40 ms, gear 8 = 80 ms.
// 'small' (1 item, due 100) can start until 90; 'big' (8 items, due 120, LATER) only until 40, so it
// sits behind 'small' in deadline order while being the first to become hopeless.
const options: SchedulerOptionsInput = {
  priorityLevels: 3,
  maxQueueDelayMs: [0, 5, 20],
  agingMs: null,
  gears: [1, 2, 4, 8],
  maxBatchSize: 8,
  priorDeviceBaseMs: 0,
  priorDevicePerItemMs: 10,
};
const small: ReqSpec = { id: 'small', priority: 2, deadlineAt: 100 };
const big: ReqSpec = { id: 'big', priority: 2, items: 8, deadlineAt: 120 };

interface Case {
  name: string;
  options?: SchedulerOptionsInput;
  reqs: ReqSpec[];
  /** nextUnreachableAt() before the call. */
  unreachableAt: number;
  call: 'collectExpired' | 'decide';
  now: number;
  deviceFreeAt: number;
  maxLevel?: number;
  expired: string[];
  dispatched?: string[];
  queued: string[];
}

const cases: Case[] = [
  {
    name: 'busy device: a larger request behind a viable head is expired by collectExpired',
    reqs: [small, big],
    unreachableAt: 40,
    call: 'collectExpired',
    now: 0,
    deviceFreeAt: 50,
    expired: ['big'],
    queued: ['small'],
  },
  {
    name: 'a larger request behind the head that can still make it stays queued',
    reqs: [small, { ...big, deadlineAt: 140 }],
    unreachableAt: 60,
    call: 'collectExpired',
    now: 0,
    deviceFreeAt: 50,
    expired: [],
    queued: ['small', 'big'],
  },
  {
    name: 'capped decide: the urgent batch never reaches level 2, the hopeless request is expired anyway',
    reqs: [{ id: 'top', deadlineAt: 1000 }, small, big],
    unreachableAt: 40,
    call: 'decide',
    now: 0,
    deviceFreeAt: 50,
    maxLevel: 0,
    expired: ['big'],
    dispatched: ['top'],
    queued: ['small'],
  },
  {
    name: 'bucketed: a batch of another bucket does not reach it, the hopeless request is expired anyway',
    options: { ...options, buckets: [8, 16] },
    reqs: [{ id: 'top', priority: 0, length: 4 }, { ...small, priority: 1, length: 12 }, { ...big, priority: 1, length: 12 }],
    unreachableAt: 40,
    call: 'decide',
    now: 0,
    deviceFreeAt: 50,
    expired: ['big'],
    dispatched: ['top'],
    queued: ['small'],
  },
  {
    name: 'the head itself hopeless: expired as before, viable ones behind it stay',
    reqs: [{ id: 'a', priority: 2, items: 4, deadlineAt: 60 }, { id: 'b', priority: 2, items: 3, deadlineAt: 95 }, small],
    unreachableAt: 20,
    call: 'collectExpired',
    now: 0,
    deviceFreeAt: 50,
    expired: ['a'],
    queued: ['b', 'small'],
  },
];

describe('a request hopeless behind a viable head is expired as soon as the scheduler can tell', () => {
  it.each(cases)('$name', (c) => {
    const s = new BatchScheduler<string>(c.options ?? options);
    for (const spec of c.reqs) expect(s.enqueue(req(spec)).kind).not.toBe('rejected');
    expect(s.nextUnreachableAt()).toBe(c.unreachableAt);
    if (c.call === 'collectExpired') {
      expect(ids(s.collectExpired(c.now, c.deviceFreeAt))).toEqual(c.expired);
    } else {
      const d = s.decide(c.now, c.deviceFreeAt, c.maxLevel);
      expect(ids(d.expired)).toEqual(c.expired);
      expect(d.kind === 'dispatch' ? ids(d.batch.members) : []).toEqual(c.dispatched ?? []);
    }
    expect(c.reqs.map((r) => r.id).filter((id) => s.has(id))).toEqual(c.queued);
  });

  it('while the device overruns its estimate, the larger request is answered when its own start passes (41), not the head\'s (91)', () => {
    // Worker with both slots taken: collectExpired at every wake, next wake just past nextUnreachableAt.
    const clock = new ManualClock(0);
    const s = new BatchScheduler<string>(options);
    s.enqueue(req(small));
    s.enqueue(req(big));
    const estimatedFreeAt = 10; // the running batch really ends at 200
    const expiredAt = new Map<string, number>();
    while (clock.nowMs < 200 && s.queuedRequests > 0) {
      for (const r of s.collectExpired(clock.nowMs, estimatedFreeAt)) expiredAt.set(r.id, clock.nowMs);
      clock.set(Math.min(200, s.nextUnreachableAt() + 1));
    }
    expect(expiredAt.get('big')).toBe(41);
    expect(expiredAt.get('small')).toBe(91);
  });

  it.each([
    { name: 'behind the head', smallDeadlineAt: 6060 },
    { name: 'at the head', smallDeadlineAt: 6100 },
  ])('the expiry sweep does not mark a batch as a probe for a stale-gear request it leaves queued ($name)', ({ smallDeadlineAt }) => {
    const s = new BatchScheduler<string>({ ...options, estimateTrustMs: 5000, probeIntervalMs: 1000 });
    s.recordCompletion(8, 80, 0); // gear 8 is stale by 6000
    s.recordCompletion(1, 10, 5999);
    s.enqueue(req({ id: 'top', at: 6000, deadlineAt: 7000 }));
    s.enqueue(req({ ...small, at: 6000, deadlineAt: smallDeadlineAt }));
    // Hopeless by its stale estimate (6000 + 80 > 6070), but a probe may still try it: it stays.
    s.enqueue(req({ ...big, at: 6000, deadlineAt: 6070 }));
    const d = s.decide(6000, 6000, 0);
    if (d.kind !== 'dispatch') throw new Error(d.kind);
    expect(ids(d.batch.members)).toEqual(['top']);
    expect(d.batch.probe).toBe(false);
    expect(s.has('big')).toBe(true);
  });
});

describe('property: after collectExpired, nothing queued is out of reach and nothing reachable was expired', () => {
  const arbReq = fc.record({
    priority: fc.integer({ min: 0, max: 2 }),
    items: fc.integer({ min: 1, max: 8 }),
    deadlineMs: fc.option(fc.double({ min: 0, max: 150, noNaN: true }), { nil: undefined }),
    length: fc.integer({ min: 0, max: 16 }),
  });
  const arbSample = fc.record({ gear: fc.constantFrom(1, 2, 4, 8), ms: fc.double({ min: 0, max: 100, noNaN: true }) });

  it('holds for random queues, learnt estimates and start times', () => {
    fc.assert(
      fc.property(
        fc.array(arbReq, { minLength: 1, maxLength: 40 }),
        fc.array(arbSample, { maxLength: 6 }),
        fc.boolean(),
        fc.double({ min: 0, max: 150, noNaN: true }),
        (reqs, samples, bucketed, startAt) => {
          const s = new BatchScheduler<string>({ ...options, buckets: bucketed ? [4, 16] : [] });
          samples.forEach((x, i) => s.recordCompletion(x.gear, x.ms, i));
          reqs.forEach((r, i) => s.enqueue(req({ id: `r${i}`, priority: r.priority, items: r.items, deadlineAt: r.deadlineMs, length: r.length })));
          const est = (items: number) => reachMs(s, items);
          for (const e of s.collectExpired(0, startAt)) expect(startAt + est(e.items)).toBeGreaterThan(e.deadlineAt as number);
          let latestStart = Infinity;
          reqs.forEach((r, i) => {
            if (r.deadlineMs === undefined || !s.has(`r${i}`)) return;
            expect(startAt + est(r.items)).toBeLessThanOrEqual(r.deadlineMs);
            latestStart = Math.min(latestStart, r.deadlineMs - est(r.items));
          });
          expect(s.nextUnreachableAt()).toBe(latestStart);
        },
      ),
      { numRuns: 300 },
    );
  });
});
