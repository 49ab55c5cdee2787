import { describe, expect, it } from 'vitest';
import { BatchScheduler } from '../../../src/scheduler/index.ts';
import { req } from './scheduler-fixtures.ts';

/**
 * The runtime's clock steps (NTP, a VM resume) by `stepMs` at real time 5 ms; `decideAtRealMs`
 * is real time since the first arrival (at 0 on both clocks). Before the step the wall clock
 * reads real time; after it, real time + stepMs. Level 0 waits 20 ms to fill a batch, level 1 is
 * overdue 100 ms after arrival (aging 50 ms × (level + 1)).
 */
interface Case {
  name: string;
  stepMs: number;
  /** Requests arriving at these real times (a later arrival reads the stepped clock). */
  arrivals: Array<{ id: string; atRealMs: number; priority?: number; deadlineAtWall?: number }>;
  decideAtRealMs: number;
  expected: { kind: 'wait'; untilAtWall: number } | { kind: 'dispatch'; ids: string[] } | { kind: 'idle'; expired: string[] };
}

const cases: Case[] = [
  { name: 'no step: waits out its 20 ms', stepMs: 0, arrivals: [{ id: 'a', atRealMs: 0 }], decideAtRealMs: 10, expected: { kind: 'wait', untilAtWall: 20 } },
  // Before: wait until wall 20, i.e. real 1020.
  { name: 'a step back of 1 s: still due at real 20 ms', stepMs: -1000, arrivals: [{ id: 'a', atRealMs: 0 }], decideAtRealMs: 10, expected: { kind: 'wait', untilAtWall: -980 } },
  // Before: wait until wall 20 (another second).
  { name: 'a step back of 1 s: goes at real 20 ms', stepMs: -1000, arrivals: [{ id: 'a', atRealMs: 0 }], decideAtRealMs: 20, expected: { kind: 'dispatch', ids: ['a'] } },
  // Before: dispatched at once, 10 ms short of its fill delay.
  { name: 'a step forward of 1 s: still waits out its 20 ms', stepMs: 1000, arrivals: [{ id: 'a', atRealMs: 0 }], decideAtRealMs: 10, expected: { kind: 'wait', untilAtWall: 1020 } },
  {
    name: 'an arrival after the step counts from its own arrival, the one before it from its own',
    stepMs: -1000,
    arrivals: [
      { id: 'a', atRealMs: 0 },
      { id: 'b', atRealMs: 15 },
    ],
    decideAtRealMs: 20,
    expected: { kind: 'dispatch', ids: ['a', 'b'] },
  },
  {
    name: 'deadlines stay on the wall clock: a step forward past one expires it',
    stepMs: 1000,
    arrivals: [{ id: 'a', atRealMs: 0, deadlineAtWall: 500 }],
    decideAtRealMs: 10,
    expected: { kind: 'idle', expired: ['a'] },
  },
  {
    name: 'deadlines stay on the wall clock: a step back gives a request the time its deadline says',
    stepMs: -1000,
    arrivals: [{ id: 'a', atRealMs: 0, deadlineAtWall: 500 }],
    decideAtRealMs: 10,
    expected: { kind: 'wait', untilAtWall: -980 },
  },
];

const wallAt = (realMs: number, stepMs: number): number => (realMs < 5 ? realMs : realMs + stepMs);

describe('BatchScheduler.clockStepped: queue delays count real time, deadlines the wall clock', () => {
  it.each(cases)('$name', ({ stepMs, arrivals, decideAtRealMs, expected }) => {
    const s = new BatchScheduler<string>({ maxBatchSize: 8, priorityLevels: 2, maxQueueDelayMs: [20, 20], agingMs: 50 });
    let stepped = false;
    const stepBy = (realMs: number): void => {
      if (stepped || realMs < 5) return;
      stepped = true;
      if (stepMs !== 0) s.clockStepped(stepMs);
    };
    for (const a of arrivals) {
      stepBy(a.atRealMs);
      s.enqueue(req({ id: a.id, at: wallAt(a.atRealMs, stepMs), priority: a.priority ?? 0, deadlineAt: a.deadlineAtWall }));
    }
    stepBy(decideAtRealMs);
    const d = s.decide(wallAt(decideAtRealMs, stepMs));
    if (expected.kind === 'wait') expect(d).toMatchObject({ kind: 'wait', untilAt: expected.untilAtWall });
    else if (expected.kind === 'dispatch') expect(d.kind === 'dispatch' ? d.batch.members.map((m) => m.id) : d).toEqual(expected.ids);
    else expect({ kind: d.kind, expired: d.expired.map((r) => r.id) }).toEqual(expected);
  });

  it('aging and queue ages count real time across a step back', () => {
    const s = new BatchScheduler<string>({ maxBatchSize: 8, priorityLevels: 2, maxQueueDelayMs: [20, null], agingMs: 50 });
    s.enqueue(req({ id: 'bulk', at: 0, priority: 1 }));
    s.clockStepped(-1000);
    // Real 100 ms: overdue (2 × 50 ms), 100 ms old. Before: neither, until real 1100 ms.
    expect(s.leadsOverdue(-900)).toBe(true);
    expect(s.leadsOverdue(-901)).toBe(false);
    expect(s.stats(-900).levels[1]?.oldestAgeMs).toBe(100);
  });

  it('the adaptive limit grows back after its interval of real time across a step back', () => {
    const s = new BatchScheduler<string>({ priorityLevels: 1, agingMs: null, gears: [1, 2, 4, 8], maxBatchSize: 8, targetLatencyMs: 10, adaptiveWindowBatches: 5, adaptiveGrowIntervalMs: 100 });
    for (let t = 1; t <= 5; t++) s.recordCompletion(8, 40, t);
    expect(s.limit).toBe(4);
    s.clockStepped(-10_000);
    // 2 s of real time, on the stepped clock: fast batches. Before: no growth for 10 s.
    for (let t = -9_990; t <= -8_000; t += 10) s.recordCompletion(4, 3, t);
    expect(s.limit).toBe(8);
  });

  it('a stale estimate is probed estimateTrustMs of real time after its sample, across a step back', () => {
    const s = new BatchScheduler<string>({ priorityLevels: 1, maxQueueDelayMs: [0], agingMs: null, gears: [1], maxBatchSize: 1, estimateTrustMs: 5000 });
    s.recordCompletion(1, 20, 0);
    s.clockStepped(-10_000);
    // Real 6 s after the sample; due in 10 ms, which the 20 ms estimate rules out but a probe may try.
    s.enqueue(req({ id: 'probe', at: -4_000, deadlineAt: -3_990 }));
    const d = s.decide(-4_000);
    // Before: expired (the sample looked 4 s in the future, not 6 s in the past).
    expect(d.kind === 'dispatch' ? { ids: d.batch.members.map((m) => m.id), probe: d.batch.probe } : d).toEqual({ ids: ['probe'], probe: true });
  });
});
