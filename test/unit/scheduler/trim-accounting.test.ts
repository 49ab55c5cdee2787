import { describe, expect, it } from 'vitest';
import { BatchScheduler } from '../../../src/scheduler/index.ts';
import { ids, req } from './scheduler-fixtures.ts';

// Same shape as the 'trim: the tail goes back' rule case: 9 requests, the 9th is handed back.
const options = { priorityLevels: 3, maxQueueDelayMs: [0, 5, 20], agingMs: null, gears: [1, 2, 4, 8, 16], maxBatchSize: 16 };

describe('BatchScheduler: a trimmed tail keeps its queue accounting', () => {
  it('queued bytes still count the request handed back by trimPadding', () => {
    const s = new BatchScheduler<string>(options);
    for (let i = 0; i < 9; i++) s.enqueue(req({ id: `r${i}`, priority: 2, at: i === 0 ? 0 : 15, bytes: 100 }));
    const d = s.decide(20);
    expect(d.kind).toBe('dispatch');
    if (d.kind !== 'dispatch') return;
    expect(d.batch.members).toHaveLength(8);
    expect(s.queuedRequests).toBe(1);
    expect(s.queuedBytes).toBe(100);
    // Once the last one leaves too, nothing is held: never negative.
    expect(ids(s.drain())).toEqual(['r8']);
    expect(s.queuedBytes).toBe(0);
  });

  it('a byte hard limit still holds after a trim', () => {
    const s = new BatchScheduler<string>({ ...options, softLimitBytes: 500, hardLimitBytes: 1000 });
    for (let i = 0; i < 9; i++) s.enqueue(req({ id: `r${i}`, priority: 2, at: i === 0 ? 0 : 15, bytes: 100 }));
    expect(s.decide(20).kind).toBe('dispatch');
    // 100 bytes held by r8: 900 more fit, 901 do not.
    expect(s.enqueue(req({ id: 'x', priority: 2, at: 21, bytes: 900 })).kind).not.toBe('rejected');
    expect(s.enqueue(req({ id: 'y', priority: 2, at: 21, bytes: 1 })).kind).toBe('rejected');
  });
});
