import { describe, expect, it } from 'vitest';
import { BatchScheduler } from '../../../src/scheduler/index.ts';
import type { SchedulerOptionsInput } from '../../../src/scheduler/index.ts';
import { ids, req } from './scheduler-fixtures.ts';
import type { ReqSpec } from './scheduler-fixtures.ts';

// 10 ms per gear slot; no dispatch on age, so only 'full' and 'deadline' can release a batch.
// Three 80 ms gear-8 batches against a 20 ms target bring the adaptive limit down to gear 4.
const options: SchedulerOptionsInput = {
  priorityLevels: 3,
  maxQueueDelayMs: [null, null, null],
  agingMs: null,
  gears: [1, 2, 4, 8],
  maxBatchSize: 8,
  priorDeviceBaseMs: 0,
  priorDevicePerItemMs: 10,
  targetLatencyMs: 20,
  adaptiveWindowBatches: 3,
};

interface Case {
  name: string;
  reqs: ReqSpec[];
  /** Batches in order, each formed when the previous one is estimated to end. */
  batches: { members: string[]; reason: string }[];
}

// The release check reads only each lane's earliest deadline. A request behind it can have an
// earlier latest start only when it is larger than the limit (see BatchScheduler.trigger), and then
// its bucket is full: it is not held back.
const cases: Case[] = [
  {
    name: '8 items due 120 (start by 40) behind 1 item due 100 (start by 90)',
    reqs: [{ id: 'small', priority: 2, deadlineAt: 100 }, { id: 'big', priority: 2, items: 8, deadlineAt: 120 }],
    batches: [
      { members: ['small'], reason: 'full' },
      { members: ['big'], reason: 'full' },
    ],
  },
  {
    name: 'the same behind a level-1 head due 100 in another lane',
    reqs: [{ id: 'head', priority: 1, deadlineAt: 100 }, { id: 'small', priority: 2, deadlineAt: 100 }, { id: 'big', priority: 2, items: 8, deadlineAt: 120 }],
    batches: [
      { members: ['head', 'small'], reason: 'full' },
      { members: ['big'], reason: 'full' },
    ],
  },
];

describe('BatchScheduler: a request whose latest start comes before its lane head\'s is not held past it', () => {
  it.each(cases)('$name', ({ reqs, batches }) => {
    const s = new BatchScheduler<string>(options);
    for (let i = 0; i < 3; i++) s.recordCompletion(8, 80, -1);
    expect(s.limit).toBe(4);
    for (const spec of reqs) s.enqueue(req(spec));
    let freeAt = 0;
    for (const want of batches) {
      const d = s.decide(0, freeAt);
      expect(ids(d.expired)).toEqual([]);
      if (d.kind !== 'dispatch') throw new Error(`${d.kind} instead of ${want.members.join(', ')}`);
      expect({ members: ids(d.batch.members), reason: d.batch.reason }).toEqual(want);
      freeAt = d.batch.startAt + d.batch.estimatedDeviceMs;
      expect(freeAt).toBeLessThanOrEqual(Math.min(...d.batch.members.map((m) => m.deadlineAt ?? Infinity)));
    }
    expect(s.queuedRequests).toBe(0);
  });
});
