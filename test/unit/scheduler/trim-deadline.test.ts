import { describe, expect, it } from 'vitest';
import { BatchScheduler } from '../../../src/scheduler/index.ts';
import { ids, req } from './scheduler-fixtures.ts';

// Prior device time 5 + 0.5 × gear: gear 8 = 9 ms, gear 16 = 13 ms, gear 1 = 5.5 ms; margin 1 ms.
const options = { priorityLevels: 3, maxQueueDelayMs: [0, 5, 20], agingMs: null, gears: [1, 2, 4, 8, 16], maxBatchSize: 16 };

describe('BatchScheduler: trimPadding never hands back a request it would make late', () => {
  // 9 requests, due at 20, the tail last by deadline. Untrimmed (gear 16) the batch ends at 33;
  // trimmed to gear 8 it ends at 29, and the tail can start no earlier than that: 29 + 5.5 > 34.
  const load = (s: BatchScheduler<string>, tailDeadline: number) => {
    for (let i = 0; i < 8; i++) s.enqueue(req({ id: `r${i}`, priority: 2, at: i === 0 ? 0 : 15, deadlineAt: 33.5 }));
    s.enqueue(req({ id: 'tail', priority: 2, at: 15, deadlineAt: tailDeadline }));
  };

  it('keeps the tail in the batch when it could not meet its deadline after the trimmed batch', () => {
    const s = new BatchScheduler<string>(options);
    load(s, 34);
    const d = s.decide(20);
    expect(d.kind).toBe('dispatch');
    if (d.kind !== 'dispatch') return;
    expect(ids(d.batch.members)).toContain('tail');
    expect(d.batch.gear).toBe(16);
    expect(d.batch.startAt + d.batch.estimatedDeviceMs).toBeLessThanOrEqual(34);
  });

  it('a handed-back tail can still be dispatched in time once the trimmed batch is done', () => {
    const s = new BatchScheduler<string>(options);
    load(s, 34);
    const first = s.decide(20);
    if (first.kind !== 'dispatch') throw new Error(first.kind);
    const freeAt = first.batch.startAt + first.batch.estimatedDeviceMs;
    const second = s.decide(20, freeAt);
    expect(ids(second.expired)).toEqual([]);
    expect(s.stats(20).expiredRequests).toBe(0);
  });

  it('still trims a tail with room to wait (deadline well after the trimmed batch)', () => {
    const s = new BatchScheduler<string>(options);
    load(s, 60);
    const d = s.decide(20);
    if (d.kind !== 'dispatch') throw new Error(d.kind);
    expect(d.batch.gear).toBe(8);
    expect(s.has('tail')).toBe(true);
  });
});
