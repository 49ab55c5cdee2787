import { describe, expect, it } from 'vitest';
import { DeviceTimeEstimator } from '../../../src/scheduler/device-time-estimator.ts';
import { GearTable, padUpToleranceMs } from '../../../src/scheduler/gear-table.ts';
import { BatchScheduler } from '../../../src/scheduler/index.ts';
import type { SchedulerOptionsInput } from '../../../src/scheduler/index.ts';
import { ManualClock, ids, req } from './scheduler-fixtures.ts';
import type { ReqSpec } from './scheduler-fixtures.ts';

// Learnt estimates that are not monotone in the gear (e.g. after 0 ms samples or a slow warm-up):
// gear 1 = 20 ms, gear 2 = 1 ms, gear 4 = 4 ms, gear 8 = 16 ms, gear 16 = 40 ms. Whatever the truth,
// a batch can always be padded up, so a request is out of reach only when no gear holding it ends
// in time, and a batch that would miss in its own gear runs in the smallest larger one that does not.
const options: SchedulerOptionsInput = { priorityLevels: 3, maxQueueDelayMs: [0, 5, 20], agingMs: null, gears: [1, 2, 4, 8, 16], maxBatchSize: 16 };
const learn = (s: BatchScheduler<string>) =>
  [[1, 20], [2, 1], [4, 4], [8, 16], [16, 40]].forEach(([gear, ms], i) => s.recordCompletion(gear as number, ms as number, i));
const five = (deadlineAt: number): ReqSpec[] => [0, 1, 2, 3, 4].map((i) => ({ id: `a${i}`, at: 100, deadlineAt }));

interface Case {
  name: string;
  reqs: ReqSpec[];
  unreachableAt: number;
  expired: string[];
  members: string[];
  gear?: number;
}

const cases: Case[] = [
  {
    name: 'five 1-item requests due in 17 ms go as one gear-8 batch (16 ms), not expired by gear 1 (20 ms)',
    reqs: five(117),
    unreachableAt: 116,
    expired: [],
    members: ['a0', 'a1', 'a2', 'a3', 'a4'],
    gear: 8,
  },
  {
    name: 'a lone request due in 5 ms runs padded to gear 2 (1 ms)',
    reqs: [{ id: 'solo', at: 100, deadlineAt: 105 }],
    unreachableAt: 104,
    expired: [],
    members: ['solo'],
    gear: 2,
  },
  {
    name: 'a lone request that no gear can serve is expired',
    reqs: [{ id: 'solo', at: 100, deadlineAt: 100.5 }, { id: 'other', at: 100, deadlineAt: 1000 }],
    unreachableAt: 99.5,
    expired: ['solo'],
    members: ['other'],
  },
  {
    name: 'a lone request with room in its own gear is not padded',
    reqs: [{ id: 'solo', at: 100, deadlineAt: 130 }],
    unreachableAt: 129,
    expired: [],
    members: ['solo'],
    gear: 1,
  },
];

describe('BatchScheduler: estimates that make a bigger gear look faster', () => {
  it.each(cases)('$name', (c) => {
    const s = new BatchScheduler<string>(options);
    learn(s);
    for (const spec of c.reqs) s.enqueue(req(spec));
    expect(s.nextUnreachableAt()).toBe(c.unreachableAt);
    const d = s.decide(100);
    expect(ids(d.expired)).toEqual(c.expired);
    if (d.kind !== 'dispatch') throw new Error(d.kind);
    expect(ids(d.batch.members)).toEqual(c.members);
    if (c.gear !== undefined) expect(d.batch.gear).toBe(c.gear);
    expect(d.batch.paddedItems).toBe(d.batch.gear - d.batch.items);
    expect(d.batch.probe).toBe(false);
    expect(d.batch.startAt + d.batch.estimatedDeviceMs).toBeLessThanOrEqual(Math.min(...d.batch.members.map((m) => m.deadlineAt ?? Infinity)));
  });

  it.each([
    { name: 'due 120: trimmed off, then served in gear 2 after the gear-4 batch', eDeadlineAt: 120 },
    { name: 'due 130: trimmed off, then served in its own gear', eDeadlineAt: 130 },
  ])('trimPadding hands back only a request it can still serve: $name', ({ eDeadlineAt }) => {
    // a0..a3 (due 117) and 'e' fill 5 items (gear 8, 16 ms); 'x' (2 items, alone) stays queued, so
    // the trim judges e by a 2-item batch. Trimmed to gear 4 the batch ends at 104.
    const s = new BatchScheduler<string>(options);
    learn(s);
    for (let i = 0; i < 4; i++) s.enqueue(req({ id: `a${i}`, priority: 1, at: 100, deadlineAt: 117 }));
    s.enqueue(req({ id: 'e', priority: 1, at: 100, deadlineAt: eDeadlineAt }));
    s.enqueue(req({ id: 'x', priority: 1, items: 2, at: 100, deadlineAt: 1000, alone: true }));
    const first = s.decide(100);
    expect(ids(first.expired)).toEqual([]);
    if (first.kind !== 'dispatch') throw new Error(first.kind);
    expect(ids(first.batch.members)).toEqual(['a0', 'a1', 'a2', 'a3']);
    const freeAt = first.batch.startAt + first.batch.estimatedDeviceMs;
    expect(freeAt).toBe(104);
    let second = s.decide(freeAt);
    while (second.kind === 'wait') {
      expect(ids(second.expired)).toEqual([]);
      second = s.decide(second.untilAt);
    }
    expect(ids(second.expired)).toEqual([]);
    if (second.kind !== 'dispatch') throw new Error(second.kind);
    expect(ids(second.batch.members)).toEqual(['e']);
    expect(second.batch.startAt + second.batch.estimatedDeviceMs).toBeLessThanOrEqual(eDeadlineAt);
  });
});

// A larger gear counts only when estimated faster than the own gear by more than
// padUpToleranceMs(own) = max(1 µs, 1e-6 × own). Estimates are set exactly: a gear's first sample
// becomes its estimate. The clock is manual; batches start at 1 ms, where 1.8e-15 ms still shows
// (at 100 ms a double cannot hold it and every case below would fit in its own gear).
describe('GearTable: padding up needs a larger gear faster beyond the tolerance', () => {
  const startAt = 1;
  const ci = 0.5000000000000018;

  interface GearCase {
    name: string;
    /** Estimates of gears 1, 4 and 16. */
    ms: [number, number, number];
    /** Deadline, relative to startAt. */
    dueInMs: number;
    /** Premise: the own gear (1) ends past the deadline. */
    ownMisses: boolean;
    /** The gear runGear picks for one item. */
    gear: number;
    /** reachMs(1): the least estimate of gear 1 and the gears above faster beyond the tolerance. */
    reach: number;
  }
  const withGain = (ownMs: number, largerMs: number, gear: number, reach: number) => ({ ms: [ownMs, largerMs, ownMs] as [number, number, number], dueInMs: largerMs, ownMisses: true, gear, reach });
  const exactTolerance = (ownMs: number) => ownMs - padUpToleranceMs(ownMs);
  const cases: GearCase[] = [
    { name: 'CI stream: gear 1 0.5000000000000018 ms misses by 1.8e-15, gear 4 0.5 ms: own gear', ms: [ci, 0.5, 0.5], dueInMs: 0.5, ownMisses: true, gear: 1, reach: ci },
    { name: 'a real gain (gear 1 0.6 ms, gear 4 0.5 ms): padded to gear 4', ms: [0.6, 0.5, 0.5], dueInMs: 0.5, ownMisses: true, gear: 4, reach: 0.5 },
    { name: 'own gear ends in time: not padded, however fast gear 4 is', ms: [0.6, 0.2, 0.2], dueInMs: 0.6, ownMisses: false, gear: 1, reach: 0.2 },
    { name: 'no gear ends in time: own gear', ms: [0.6, 0.5, 0.5], dueInMs: 0.4, ownMisses: true, gear: 1, reach: 0.5 },
    { name: 'gain exactly 1 µs (the tolerance): own gear', ...withGain(2, exactTolerance(2), 1, 2) },
    { name: 'gain 1 µs + 1e-9 ms: padded', ...withGain(2, exactTolerance(2) - 1e-9, 4, exactTolerance(2) - 1e-9) },
    { name: 'gain 1 µs - 1e-9 ms: own gear', ...withGain(2, exactTolerance(2) + 1e-9, 1, 2) },
    { name: 'own 4 s, gain 2 µs (over 1 µs, under 1e-6 x 4 s = 4 µs): own gear', ...withGain(4000, 4000 - 0.002, 1, 4000) },
    { name: 'own 4 s, gain exactly 4 µs: own gear', ...withGain(4000, exactTolerance(4000), 1, 4000) },
    { name: 'own 4 s, gain 5 µs: padded', ...withGain(4000, 4000 - 0.005, 4, 4000 - 0.005) },
    { name: 'gear 4 ends in time but within the tolerance, gear 16 faster beyond it: padded to 16', ms: [2, 2 - 0.0005, 1.5], dueInMs: 2 - 0.0005, ownMisses: true, gear: 16, reach: 1.5 },
    { name: 'gear 4 within the tolerance, gear 16 faster beyond it but too slow: own gear', ms: [2, 2 - 0.0005, 1.9985], dueInMs: 1.998, ownMisses: true, gear: 1, reach: 1.9985 },
  ];

  const table = (ms: readonly number[], padUp = true) => {
    const estimator = new DeviceTimeEstimator(0.2, 1, 0.1);
    const clock = new ManualClock(-10);
    [1, 4, 16].forEach((gear, i) => estimator.record(gear, ms[i] as number, clock.advance(1)));
    [1, 4, 16].forEach((gear, i) => expect(estimator.estimateMs(gear)).toBe(ms[i]));
    return { table: new GearTable([1, 4, 16], padUp, estimator), estimator };
  };

  it.each(cases)('$name', (c) => {
    const { table: t, estimator } = table(c.ms);
    const deadline = startAt + c.dueInMs;
    expect(startAt + c.ms[0] > deadline).toBe(c.ownMisses);
    expect(t.runGear(1, startAt, deadline)).toBe(c.gear);
    expect(t.reachMs(1)).toBe(c.reach);
    // reach agrees with runGear: in reach exactly when the gear it runs in ends in time.
    expect(startAt + t.reachMs(1) <= deadline).toBe(startAt + estimator.estimateMs(c.gear) <= deadline);
  });

  it('without configured gears nothing is padded and reach is the own estimate', () => {
    const { table: t } = table([0.6, 0.5, 0.5], false);
    expect(t.runGear(1, startAt, startAt + 0.5)).toBe(1);
    expect(t.reachMs(1)).toBe(0.6);
  });

  it('refresh re-judges the gain as gear 1 learns it is as fast as gear 4', () => {
    const { table: t, estimator } = table([0.6, 0.5, 0.7]);
    const clock = new ManualClock(0);
    const picks: number[] = [];
    // EWMA (alpha 0.2) of 0.5 ms samples from 0.6: the gain is 0.1 × 0.8^n ms after n samples,
    // over 1 µs up to n = 20 (1.15 µs), under it from n = 21 (0.92 µs).
    for (let n = 1; n <= 22; n++) {
      estimator.record(1, 0.5, clock.advance(1));
      t.refresh();
      picks.push(t.runGear(1, startAt, startAt + 0.5));
      expect(t.reachMs(1)).toBe(n <= 20 ? 0.5 : estimator.estimateMs(1));
    }
    expect(picks).toEqual([...Array<number>(20).fill(4), 1, 1]);
  });
});

describe('BatchScheduler: a rounding-only gain does not pad a batch up', () => {
  const options: SchedulerOptionsInput = { priorityLevels: 1, maxQueueDelayMs: [0], agingMs: null, gears: [1, 4, 16], maxBatchSize: 16, deadlineMarginMs: 0 };
  const learn = (s: BatchScheduler<string>, gear1Ms: number) =>
    [[1, gear1Ms], [4, 0.5], [16, 0.5]].forEach(([gear, ms], i) => s.recordCompletion(gear as number, ms as number, i / 4));

  it.each([
    // The CI case: padding to gear 4 would end in time, the own gear misses by 1.8e-15 ms. Neither
    // is known to be faster, so the own gear judges and the request is out of reach.
    { name: 'gear 1 0.5000000000000018 ms, due in 0.5 ms: expired, not padded to gear 4', gear1Ms: 0.5000000000000018, dueInMs: 0.5, expired: ['r'], gear: undefined },
    { name: 'gear 1 0.5000000000000018 ms, due in 0.6 ms: runs in gear 1', gear1Ms: 0.5000000000000018, dueInMs: 0.6, expired: [], gear: 1 },
    { name: 'gear 1 0.6 ms, due in 0.5 ms: runs padded in gear 4', gear1Ms: 0.6, dueInMs: 0.5, expired: [], gear: 4 },
  ])('$name', ({ gear1Ms, dueInMs, expired, gear }) => {
    const s = new BatchScheduler<string>(options);
    learn(s, gear1Ms);
    const clock = new ManualClock(1);
    s.enqueue(req({ id: 'r', at: clock.nowMs, deadlineAt: clock.nowMs + dueInMs }));
    const d = s.decide(clock.nowMs);
    expect(ids(d.expired)).toEqual(expired);
    if (gear === undefined) {
      expect(d.kind).not.toBe('dispatch');
      return;
    }
    if (d.kind !== 'dispatch') throw new Error(d.kind);
    expect(d.batch.gear).toBe(gear);
    expect(d.batch.probe).toBe(false);
  });
});
