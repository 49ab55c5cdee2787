import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BatchScheduler } from '../../../src/scheduler/index.ts';
import { req } from './scheduler-fixtures.ts';

const arbSetup = fc.record({
  gears: fc.constantFrom<number[]>([1, 2, 4, 8], [1, 4, 16], []),
  delays: fc.tuple(fc.constantFrom(0, 3), fc.constantFrom(5, 40, null), fc.constantFrom(20, 200, null)),
  agingMs: fc.constantFrom(null, 15, 1000),
  // Learnt device times per gear, or none (the prior).
  samples: fc.option(fc.array(fc.double({ min: 0.05, max: 30, noNaN: true }), { minLength: 4, maxLength: 4 }), { nil: undefined }),
  requests: fc.array(
    fc.record({
      priority: fc.integer({ min: 0, max: 2 }),
      items: fc.integer({ min: 1, max: 8 }),
      atMs: fc.double({ min: 0, max: 50, noNaN: true }),
      // Relative to arrival: past, tight, loose, absurdly far, or none.
      deadlineMs: fc.option(fc.oneof(fc.double({ min: -20, max: 0, noNaN: true }), fc.double({ min: 0, max: 40, noNaN: true }), fc.constant(40 * 86_400_000)), { nil: undefined }),
    }),
    { minLength: 1, maxLength: 30 },
  ),
  nowMs: fc.double({ min: 50, max: 120, noNaN: true }),
});

describe('time alone moves a scheduler forward (manual clock)', () => {
  it('a wait is for a later time, and deciding at it dispatches, expires or waits for a later time still', () => {
    fc.assert(
      fc.property(arbSetup, (c) => {
        const s = new BatchScheduler<string>({ priorityLevels: 3, maxBatchSize: 8, gears: c.gears, maxQueueDelayMs: [...c.delays], agingMs: c.agingMs, targetLatencyMs: null });
        if (c.samples !== undefined) for (const [i, g] of [1, 2, 4, 8].entries()) s.recordCompletion(g, c.samples[i] as number, c.nowMs);
        c.requests.forEach((r, i) => s.enqueue(req({ id: `r${i}`, priority: r.priority, items: r.items, at: r.atMs, deadlineAt: r.deadlineMs === undefined ? undefined : r.atMs + r.deadlineMs })));
        let now = c.nowMs;
        for (let step = 0; step < 200 && s.queuedRequests > 0; step++) {
          const d = s.decide(now);
          if (d.kind === 'idle') {
            // Idle with work queued: none of it may have a deadline or a queue delay to wait for.
            for (const r of s.drain()) {
              expect(r.deadlineAt, `${r.id} has a deadline but nothing will wake for it`).toBeUndefined();
              expect(c.delays[r.priority], `${r.id}'s level has a queue delay but nothing will wake for it`).toBeNull();
            }
            break;
          }
          if (d.kind === 'wait') {
            expect(d.untilAt).toBeGreaterThan(now);
            expect(Number.isFinite(d.untilAt)).toBe(true);
            const queued = s.queuedRequests;
            const again = s.decide(d.untilAt);
            const progressed = again.kind === 'dispatch' || again.expired.length > 0 || s.queuedRequests < queued || (again.kind === 'wait' && again.untilAt > d.untilAt);
            expect(progressed, `decide at the wait's untilAt ${d.untilAt} did nothing`).toBe(true);
            if (again.kind === 'dispatch') s.recordCompletion(again.batch.gear, again.batch.estimatedDeviceMs, d.untilAt);
            now = again.kind === 'wait' ? again.untilAt : d.untilAt;
            continue;
          }
          s.recordCompletion(d.batch.gear, d.batch.estimatedDeviceMs, now);
          now += d.batch.estimatedDeviceMs;
        }
      }),
      { numRuns: 400 },
    );
  });

  it('nextUnreachableAt: nothing queued expires before it, something does just past it', () => {
    fc.assert(
      fc.property(arbSetup, (c) => {
        const s = new BatchScheduler<string>({ priorityLevels: 3, maxBatchSize: 8, gears: c.gears, maxQueueDelayMs: [...c.delays], agingMs: c.agingMs });
        if (c.samples !== undefined) for (const [i, g] of [1, 2, 4, 8].entries()) s.recordCompletion(g, c.samples[i] as number, 0);
        c.requests.forEach((r, i) => s.enqueue(req({ id: `r${i}`, priority: r.priority, items: r.items, at: r.atMs, deadlineAt: r.deadlineMs === undefined ? undefined : r.atMs + r.deadlineMs })));
        s.collectExpired(-1e6); // nothing is unreachable that early: only to be sure of the start
        const at = s.nextUnreachableAt();
        if (at === Infinity) {
          expect(s.collectExpired(1e15)).toEqual([]);
          return;
        }
        expect(s.collectExpired(at - 1e-6 * Math.max(1, Math.abs(at)))).toEqual([]);
        expect(s.collectExpired(at + 1).length).toBeGreaterThan(0);
      }),
      { numRuns: 400 },
    );
  });
});
