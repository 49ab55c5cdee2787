import { describe, expect, it } from 'vitest';
import { BatchScheduler } from '../../../src/scheduler/index.ts';
import { ids, req } from './scheduler-fixtures.ts';

// Prior device time: 5 + 0.5 × gear ms.
const options = { priorityLevels: 3, maxQueueDelayMs: [0, 5, 20], agingMs: null, maxBatchSize: 8 };

describe('BatchScheduler.nextUnreachableAt', () => {
  it('is Infinity without deadlines, else the earliest deadline minus the smallest batch time', () => {
    const s = new BatchScheduler<string>(options);
    s.enqueue(req({ id: 'none', priority: 2 }));
    expect(s.nextUnreachableAt()).toBe(Infinity);
    s.enqueue(req({ id: 'late', priority: 2, deadlineAt: 500 }));
    s.enqueue(req({ id: 'soon', priority: 1, items: 2, deadlineAt: 100 }));
    expect(s.nextUnreachableAt()).toBe(100 - 6);
    // Just past it, collectExpired answers that request and the next one moves up.
    expect(ids(s.collectExpired(94.5))).toEqual(['soon']);
    expect(s.nextUnreachableAt()).toBe(500 - 5.5);
  });
});
