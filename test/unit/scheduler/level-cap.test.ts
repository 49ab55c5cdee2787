import { describe, expect, it } from 'vitest';
import { BatchScheduler } from '../../../src/scheduler/index.ts';
import { ManualClock, ids, req } from './scheduler-fixtures.ts';

describe('decide(now, freeAt, maxLevel): urgent batches without low-priority filler', () => {
  const cases: Array<{ name: string; maxLevel: number; want: string[] }> = [
    { name: 'no cap: the urgent request is topped up with bulk work', maxLevel: Infinity, want: ['u1', 'm1', 'b1', 'b2'] },
    { name: 'cap 0: only top-level requests ride along', maxLevel: 0, want: ['u1'] },
    { name: 'cap 1: levels 0 and 1', maxLevel: 1, want: ['u1', 'm1'] },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const clock = new ManualClock(0);
      const s = new BatchScheduler<string>({ maxBatchSize: 8, gears: [1, 2, 4, 8], priorityLevels: 3, maxQueueDelayMs: [0, 0, 0], agingMs: null, trimPadding: false });
      for (const r of [req({ id: 'b1', priority: 2 }), req({ id: 'b2', priority: 2 }), req({ id: 'm1', priority: 1 }), req({ id: 'u1', priority: 0 })]) s.enqueue(r);
      const d = s.decide(clock.nowMs, clock.nowMs, c.maxLevel);
      expect(d.kind).toBe('dispatch');
      if (d.kind !== 'dispatch') return;
      expect(ids(d.batch.members)).toEqual(c.want);
      expect(s.queuedRequests).toBe(4 - c.want.length);
    });
  }

  it('cap 0 does not shrink a batch led by overdue bulk work (aging): it forms as usual', () => {
    const clock = new ManualClock(0);
    const s = new BatchScheduler<string>({ maxBatchSize: 8, gears: [1, 2, 4, 8], priorityLevels: 3, maxQueueDelayMs: [0, 0, 0], agingMs: 10, trimPadding: false });
    for (const r of [req({ id: 'b1', priority: 2, at: 0 }), req({ id: 'b2', priority: 2, at: 0 })]) s.enqueue(r);
    clock.advance(40); // level 2 is overdue after (2 + 1) x 10 ms
    for (const r of [req({ id: 'm1', priority: 1, at: 40 }), req({ id: 'u1', priority: 0, at: 40 })]) s.enqueue(r);
    const d = s.decide(clock.nowMs, clock.nowMs, 0);
    expect(d.kind).toBe('dispatch');
    if (d.kind !== 'dispatch') return;
    expect(ids(d.batch.members).slice(0, 2)).toEqual(['b1', 'b2']);
    expect(d.batch.members).toHaveLength(4);
  });
});
