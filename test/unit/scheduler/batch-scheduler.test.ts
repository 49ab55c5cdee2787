import { describe, expect, it } from 'vitest';
import { BatchScheduler } from '../../../src/scheduler/index.ts';
import type { Decision, SchedulerOptionsInput } from '../../../src/scheduler/index.ts';
import { ManualClock, ids, req } from './scheduler-fixtures.ts';
import type { ReqSpec } from './scheduler-fixtures.ts';

// Prior device time with these defaults: 5 + 0.5 × gear ms; deadline margin 1 ms.
const base: SchedulerOptionsInput = { priorityLevels: 3, maxQueueDelayMs: [0, 5, 20], agingMs: null, maxBatchSize: 8 };

interface Expect {
  kind: Decision['kind'];
  members?: string[];
  gear?: number;
  paddedItems?: number;
  reason?: string;
  untilAt?: number;
  expired?: string[];
}

interface Case {
  name: string;
  options?: SchedulerOptionsInput;
  reqs: ReqSpec[];
  now: number;
  deviceFreeAt?: number;
  expect: Expect;
}

const cases: Case[] = [
  { name: 'empty queue is idle', reqs: [], now: 0, expect: { kind: 'idle', expired: [] } },
  { name: 'top level (delay 0) dispatches at once', reqs: [{ id: 'a' }], now: 0, expect: { kind: 'dispatch', members: ['a'], gear: 1, reason: 'delay' } },
  { name: 'level 1 waits its maxQueueDelayMs', reqs: [{ id: 'a', priority: 1, at: 0 }], now: 2, expect: { kind: 'wait', untilAt: 5 } },
  { name: 'level 1 goes once its delay has passed', reqs: [{ id: 'a', priority: 1, at: 0 }], now: 5, expect: { kind: 'dispatch', members: ['a'], reason: 'delay' } },
  {
    name: 'a full batch goes before any delay',
    reqs: [1, 2, 3, 4].map((i) => ({ id: `r${i}`, priority: 2, items: 2 })),
    now: 0,
    expect: { kind: 'dispatch', members: ['r1', 'r2', 'r3', 'r4'], gear: 8, reason: 'full' },
  },
  {
    name: 'batch is padded up to the next gear and the padding counted',
    options: { gears: [1, 2, 4, 8] },
    reqs: [{ id: 'a', priority: 1, items: 2 }, { id: 'b', priority: 1, items: 1 }],
    now: 5,
    expect: { kind: 'dispatch', members: ['a', 'b'], gear: 4, paddedItems: 1 },
  },
  {
    name: 'largest usable gear: the rest stays queued',
    options: { gears: [1, 2, 4, 8] },
    reqs: Array.from({ length: 10 }, (_, i) => ({ id: `r${i}`, priority: 2, at: i })),
    now: 10,
    expect: { kind: 'dispatch', members: ['r0', 'r1', 'r2', 'r3', 'r4', 'r5', 'r6', 'r7'], gear: 8, reason: 'full' },
  },
  {
    name: 'a request is never split across batches',
    reqs: [{ id: 'a', priority: 2, items: 3 }, { id: 'b', priority: 2, items: 3 }, { id: 'c', priority: 2, items: 3 }],
    now: 0,
    expect: { kind: 'dispatch', members: ['a', 'b'], gear: 6, reason: 'full' },
  },
  {
    name: 'earliest deadline first within a priority',
    reqs: [
      { id: 'late', priority: 1, at: 0, deadlineAt: 500 },
      { id: 'none', priority: 1, at: 0 },
      { id: 'soon', priority: 1, at: 1, deadlineAt: 100 },
    ],
    now: 5,
    expect: { kind: 'dispatch', members: ['soon', 'late', 'none'] },
  },
  {
    name: 'priority before deadline and arrival',
    reqs: [{ id: 'low', priority: 2, at: 0, deadlineAt: 40 }, { id: 'top', priority: 0, at: 3, deadlineAt: 900 }],
    now: 3,
    expect: { kind: 'dispatch', members: ['top', 'low'] },
  },
  {
    name: 'waiting is cut short by a deadline (release time = deadline − est − margin)',
    reqs: [{ id: 'a', priority: 2, at: 0, deadlineAt: 18 }],
    now: 0,
    expect: { kind: 'wait', untilAt: 18 - 5.5 - 1 },
  },
  {
    name: 'released early for a deadline',
    reqs: [{ id: 'a', priority: 2, at: 0, deadlineAt: 18 }],
    now: 11.5,
    expect: { kind: 'dispatch', members: ['a'], reason: 'deadline' },
  },
  {
    name: 'a request that cannot make its deadline is expired, never dispatched',
    reqs: [{ id: 'doomed', deadlineAt: 5 }, { id: 'ok', deadlineAt: 100 }],
    now: 0,
    expect: { kind: 'dispatch', members: ['ok'], expired: ['doomed'] },
  },
  {
    name: 'the device being busy counts against deadlines',
    reqs: [{ id: 'a', deadlineAt: 50 }],
    now: 0,
    deviceFreeAt: 48,
    expect: { kind: 'idle', expired: ['a'] },
  },
  {
    name: 'the wait is the earliest of delays and deadline releases',
    reqs: [{ id: 'a', priority: 2, at: 0 }, { id: 'b', priority: 1, at: 1 }],
    now: 2,
    expect: { kind: 'wait', untilAt: 6 },
  },
  {
    name: 'a level with no delay (null) and no deadline waits for a full batch: idle',
    options: { maxQueueDelayMs: [0, 5, null] },
    reqs: [{ id: 'a', priority: 2 }],
    now: 1000,
    expect: { kind: 'idle', expired: [] },
  },
  {
    name: 'a due lower level releases the batch, which still starts with the higher level',
    reqs: [{ id: 'old2', priority: 2, at: 0 }, { id: 'new1', priority: 1, at: 19 }],
    now: 20,
    expect: { kind: 'dispatch', members: ['new1', 'old2'], reason: 'delay' },
  },
  {
    name: 'aging: an overdue low-priority request goes before fresh top-priority ones',
    options: { agingMs: 10 },
    reqs: [{ id: 'old2', priority: 2, at: 0 }, { id: 'fresh0', priority: 0, at: 30 }],
    now: 30,
    expect: { kind: 'dispatch', members: ['old2', 'fresh0'] },
  },
  {
    name: 'aging: not yet overdue keeps strict priority',
    options: { agingMs: 10 },
    reqs: [{ id: 'old2', priority: 2, at: 0 }, { id: 'fresh0', priority: 0, at: 29 }],
    now: 29,
    expect: { kind: 'dispatch', members: ['fresh0', 'old2'] },
  },
  {
    name: 'trim: the tail goes back when a smaller gear is cheaper per item',
    options: { gears: [1, 2, 4, 8, 16], maxBatchSize: 16 },
    reqs: Array.from({ length: 9 }, (_, i) => ({ id: `r${i}`, priority: 2, at: i === 0 ? 0 : 15 })),
    now: 20,
    expect: { kind: 'dispatch', members: ['r0', 'r1', 'r2', 'r3', 'r4', 'r5', 'r6', 'r7'], gear: 8, paddedItems: 0 },
  },
  {
    name: 'trim: a tail member that is due is not held back',
    options: { gears: [1, 2, 4, 8, 16], maxBatchSize: 16 },
    reqs: Array.from({ length: 9 }, (_, i) => ({ id: `r${i}`, priority: 2, at: 0 })),
    now: 20,
    expect: { kind: 'dispatch', gear: 16, paddedItems: 7 },
  },
  {
    name: 'composition stops before a bigger gear would make a member late',
    // alone: 5.5 ms (gear 1) fits deadline 7; with b (gear 2): 6 ms still fits; with c (gear 3): 6.5 ms; deadline 6.2
    reqs: [{ id: 'a', deadlineAt: 6.2 }, { id: 'b', deadlineAt: 100 }, { id: 'c', deadlineAt: 100 }],
    now: 0,
    expect: { kind: 'dispatch', members: ['a', 'b'], gear: 2 },
  },
  {
    name: 'a request marked alone (it was on a device that hung) leads a batch of its own',
    reqs: [{ id: 'a', priority: 2, alone: true }, { id: 'b', priority: 2 }, { id: 'c', priority: 2 }],
    now: 20,
    expect: { kind: 'dispatch', members: ['a'], gear: 1 },
  },
  {
    name: 'a batch being formed stops before a request marked alone',
    reqs: [{ id: 'a', priority: 2 }, { id: 'b', priority: 2, alone: true, at: 1 }, { id: 'c', priority: 2, at: 2 }],
    now: 20,
    expect: { kind: 'dispatch', members: ['a'], gear: 1 },
  },
];

function run(c: Case): Decision<string> {
  const s = new BatchScheduler<string>({ ...base, ...c.options });
  for (const spec of c.reqs) expect(s.enqueue(req(spec)).kind).not.toBe('rejected');
  return s.decide(c.now, c.deviceFreeAt);
}

describe('BatchScheduler.decide rules (manual clock)', () => {
  it.each(cases)('$name', (c) => {
    const d = run(c);
    const e = c.expect;
    expect(d.kind).toBe(e.kind);
    if (e.expired !== undefined) expect(ids(d.expired)).toEqual(e.expired);
    if (d.kind === 'wait' && e.untilAt !== undefined) expect(d.untilAt).toBeCloseTo(e.untilAt, 9);
    if (d.kind === 'dispatch') {
      if (e.members !== undefined) expect(ids(d.batch.members)).toEqual(e.members);
      if (e.gear !== undefined) expect(d.batch.gear).toBe(e.gear);
      if (e.paddedItems !== undefined) expect(d.batch.paddedItems).toBe(e.paddedItems);
      if (e.reason !== undefined) expect(d.batch.reason).toBe(e.reason);
      for (const m of d.batch.members) expect(m.deadlineAt ?? Infinity).toBeGreaterThanOrEqual(d.batch.startAt + d.batch.estimatedDeviceMs);
    }
  });
});

describe('BatchScheduler.enqueue', () => {
  const cases: { name: string; options?: SchedulerOptionsInput; pre?: ReqSpec[]; r: ReqSpec; kind: string; reason?: string; code?: string }[] = [
    { name: 'accepted', r: { id: 'a' }, kind: 'accepted' },
    { name: 'too large for the biggest batch', r: { id: 'a', items: 9 }, kind: 'rejected', reason: 'too-large', code: 'LIMIT_EXCEEDED' },
    { name: 'priority out of range', r: { id: 'a', priority: 3 }, kind: 'rejected', reason: 'invalid', code: 'INVALID_ARGUMENT' },
    { name: 'zero items', r: { id: 'a', items: 0 }, kind: 'rejected', reason: 'invalid' },
    { name: 'duplicate id while queued', pre: [{ id: 'a' }], r: { id: 'a' }, kind: 'rejected', reason: 'duplicate' },
    { name: 'soft limit reached: backpressure', options: { softLimitItems: 4, hardLimitItems: 6 }, pre: [{ id: 'a', items: 3 }], r: { id: 'b' }, kind: 'backpressure' },
    { name: 'hard limit: rejected', options: { softLimitItems: 4, hardLimitItems: 6 }, pre: [{ id: 'a', items: 5 }], r: { id: 'b', items: 2 }, kind: 'rejected', reason: 'queue-full', code: 'QUEUE_FULL' },
    { name: 'byte soft limit reached: backpressure', options: { softLimitBytes: 1000, hardLimitBytes: 2000 }, pre: [{ id: 'a', bytes: 600 }], r: { id: 'b', bytes: 400 }, kind: 'backpressure' },
    { name: 'under both soft limits: accepted', options: { softLimitBytes: 1000, hardLimitBytes: 2000 }, pre: [{ id: 'a', bytes: 600 }], r: { id: 'b', bytes: 399 }, kind: 'accepted' },
    { name: 'byte hard limit: rejected', options: { softLimitBytes: 1000, hardLimitBytes: 2000 }, pre: [{ id: 'a', bytes: 1500 }], r: { id: 'b', bytes: 501 }, kind: 'rejected', reason: 'queue-full', code: 'QUEUE_FULL' },
    { name: 'an empty queue takes one request over the byte hard limit', options: { softLimitBytes: 1000, hardLimitBytes: 2000 }, r: { id: 'a', bytes: 5000 }, kind: 'backpressure' },
    { name: 'no byte limits by default', pre: [{ id: 'a', bytes: 2 ** 40 }], r: { id: 'b', bytes: 2 ** 40 }, kind: 'accepted' },
    { name: 'negative bytes', r: { id: 'a', bytes: -1 }, kind: 'rejected', reason: 'invalid' },
    { name: 'bucketed model needs a length', options: { buckets: [8, 16] }, r: { id: 'a' }, kind: 'rejected', reason: 'invalid' },
    { name: 'length beyond the biggest bucket', options: { buckets: [8, 16] }, r: { id: 'a', length: 17 }, kind: 'rejected', reason: 'too-long', code: 'LIMIT_EXCEEDED' },
    { name: 'length within a bucket', options: { buckets: [8, 16] }, r: { id: 'a', length: 16 }, kind: 'accepted' },
  ];
  it.each(cases)('$name', (c) => {
    const s = new BatchScheduler<string>({ ...base, ...c.options });
    for (const p of c.pre ?? []) s.enqueue(req(p));
    const r = s.enqueue(req(c.r));
    expect(r.kind).toBe(c.kind);
    if (r.kind === 'rejected') {
      expect(r.reason).toBe(c.reason);
      if (c.code !== undefined) expect(r.error.code).toBe(c.code);
    }
  });

  it('pauses intake at the soft limit and resumes at the low watermark', () => {
    const s = new BatchScheduler<string>({ ...base, softLimitItems: 4, hardLimitItems: 8, resumeBelowItems: 1 });
    for (let i = 0; i < 4; i++) s.enqueue(req({ id: `r${i}` }));
    expect(s.intakePaused).toBe(true);
    s.remove('r0');
    s.remove('r1');
    expect(s.intakePaused).toBe(true);
    s.remove('r2');
    expect(s.intakePaused).toBe(false);
  });

  it('a byte pause lasts until queued bytes are down to half the byte soft limit, items low or not', () => {
    const s = new BatchScheduler<string>({ ...base, softLimitItems: 100, softLimitBytes: 1000 });
    for (const [id, bytes] of [['a', 300], ['b', 300], ['c', 300], ['d', 100]] as const) s.enqueue(req({ id, bytes }));
    expect([s.intakePaused, s.queuedBytes]).toEqual([true, 1000]);
    s.remove('a');
    expect([s.intakePaused, s.queuedBytes]).toEqual([true, 700]);
    s.remove('b');
    expect([s.intakePaused, s.queuedBytes]).toEqual([false, 400]);
    expect(s.stats(0).queuedBytes).toBe(400);
  });
});

describe('BatchScheduler buckets', () => {
  it('one bucket per batch, padded to its bound, padding counted', () => {
    const s = new BatchScheduler<string>({ ...base, buckets: [8, 16, 32] });
    s.enqueue(req({ id: 's1', length: 5, at: 0 }));
    s.enqueue(req({ id: 'l1', length: 20, at: 1 }));
    s.enqueue(req({ id: 's2', length: 8, items: 2, at: 2 }));
    const d1 = s.decide(2);
    if (d1.kind !== 'dispatch') throw new Error(d1.kind);
    expect(ids(d1.batch.members)).toEqual(['s1', 's2']);
    expect(d1.batch.boundLength).toBe(8);
    expect(d1.batch.bucket).toBe(0);
    expect(d1.batch.paddedLengthSlots).toBe(1 * (8 - 5) + 2 * 0);
    const d2 = s.decide(2);
    if (d2.kind !== 'dispatch') throw new Error(d2.kind);
    expect(ids(d2.batch.members)).toEqual(['l1']);
    expect(d2.batch.boundLength).toBe(32);
    expect(d2.batch.paddedLengthSlots).toBe(12);
  });

  it('a batch does not take a lower level past a higher level waiting in another bucket', () => {
    const s = new BatchScheduler<string>({ ...base, buckets: [8, 16] });
    s.enqueue(req({ id: 'top-short', priority: 0, length: 4, at: 0 }));
    s.enqueue(req({ id: 'mid-long', priority: 1, length: 12, at: 0 }));
    s.enqueue(req({ id: 'low-short', priority: 2, length: 4, at: 1 }));
    const d = s.decide(1);
    if (d.kind !== 'dispatch') throw new Error(d.kind);
    expect(ids(d.batch.members)).toEqual(['top-short']);
    const d2 = s.decide(5);
    if (d2.kind !== 'dispatch') throw new Error(d2.kind);
    expect(ids(d2.batch.members)).toEqual(['mid-long']);
  });
});

describe('BatchScheduler learning and limits', () => {
  it('learns device time per gear from completions and uses it for expiry', () => {
    const s = new BatchScheduler<string>({ ...base, ewmaAlpha: 0.5 });
    expect(s.estimateDeviceMs(1)).toBe(5.5);
    s.recordCompletion(1, 20, 0);
    expect(s.estimateDeviceMs(1)).toBe(20);
    s.recordCompletion(1, 10, 1);
    expect(s.estimateDeviceMs(1)).toBe(15);
    // A gear without data is rescaled from the observed one: prior(4)/prior(1) × 15.
    expect(s.estimateDeviceMs(4)).toBeCloseTo((7 / 5.5) * 15, 9);
    s.enqueue(req({ id: 'a', deadlineAt: 14 }));
    expect(ids(s.decide(0).expired)).toEqual(['a']);
  });

  it('the adaptive limit shrinks under slow batches and caps batch size; a bigger request goes alone', () => {
    const clock = new ManualClock();
    const s = new BatchScheduler<string>({ ...base, gears: [1, 2, 4, 8], targetLatencyMs: 10, adaptiveWindowBatches: 5 });
    expect(s.limit).toBe(8);
    for (let i = 0; i < 5; i++) s.recordCompletion(8, 40, clock.advance(1));
    // 8 × (10/40)^0.5 = 4 → gear 4
    expect(s.limit).toBe(4);
    for (let i = 0; i < 6; i++) s.enqueue(req({ id: `r${i}`, priority: 2, at: clock.nowMs }));
    const d = s.decide(clock.nowMs);
    if (d.kind !== 'dispatch') throw new Error(d.kind);
    expect(d.batch.items).toBe(4);
    expect(d.batch.reason).toBe('full');
    s.drain();
    s.enqueue(req({ id: 'big', items: 6, at: clock.nowMs }));
    s.enqueue(req({ id: 'small', items: 1, at: clock.nowMs }));
    const d2 = s.decide(clock.nowMs);
    if (d2.kind !== 'dispatch') throw new Error(d2.kind);
    expect(ids(d2.batch.members)).toEqual(['big']);
    expect(d2.batch.gear).toBe(8);
  });
});

describe('BatchScheduler stats, remove, drain', () => {
  it('reports depth, oldest age, padding and expiry counts', () => {
    const s = new BatchScheduler<string>({ ...base, gears: [1, 2, 4, 8] });
    s.enqueue(req({ id: 'a', priority: 1, items: 3, at: 0 }));
    s.enqueue(req({ id: 'b', priority: 2, items: 2, at: 4 }));
    s.enqueue(req({ id: 'x', priority: 2, at: 4, deadlineAt: 6 }));
    let st = s.stats(10);
    expect(st.levels.map((l) => [l.requests, l.items, l.oldestAgeMs])).toEqual([[0, 0, 0], [1, 3, 10], [2, 3, 6]]);
    const d = s.decide(10);
    if (d.kind !== 'dispatch') throw new Error(d.kind);
    expect(ids(d.expired)).toEqual(['x']);
    expect(d.batch.gear).toBe(8);
    st = s.stats(10);
    expect(st.expiredRequests).toBe(1);
    expect(st.levels[2]?.expired).toBe(1);
    expect(st.dispatchedRequests).toBe(2);
    expect(st.paddedItems).toBe(3);
    expect(st.paddingRatio).toBeCloseTo(3 / 8, 9);
    expect(st.queuedRequests).toBe(0);
  });

  it('remove and drain take requests out and keep counters consistent', () => {
    const s = new BatchScheduler<string>(base);
    s.enqueue(req({ id: 'a', priority: 2, at: 5 }));
    s.enqueue(req({ id: 'b', priority: 1, at: 1 }));
    s.enqueue(req({ id: 'c', priority: 2, at: 3 }));
    expect(s.remove('a')?.id).toBe('a');
    expect(s.remove('a')).toBeUndefined();
    expect(s.queuedItems).toBe(2);
    expect(ids(s.drain())).toEqual(['b', 'c']);
    expect(s.queuedItems).toBe(0);
    expect(s.decide(100).kind).toBe('idle');
  });

  it('collectExpired hands back unreachable requests while the device is busy', () => {
    const s = new BatchScheduler<string>(base);
    s.enqueue(req({ id: 'a', priority: 2, deadlineAt: 30 }));
    s.enqueue(req({ id: 'b', priority: 2, deadlineAt: 300 }));
    expect(ids(s.collectExpired(10, 40))).toEqual(['a']);
    expect(s.has('b')).toBe(true);
  });
});
