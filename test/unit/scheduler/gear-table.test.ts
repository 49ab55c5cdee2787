import { describe, expect, it } from 'vitest';
import { BatchScheduler } from '../../../src/scheduler/index.ts';
import type { SchedulerOptionsInput } from '../../../src/scheduler/index.ts';
import { ids, req } from './scheduler-fixtures.ts';
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
