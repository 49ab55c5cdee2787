import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { buildResult } from '../../../src/runtime/result-builder.ts';

const ctx = { worker: 'w', device: 0 };

describe('buildResult timings', () => {
  it('a producer clock ahead of the worker: totalMs still covers the time spent in the worker', () => {
    // Created "at 1500" by a clock 500 ms fast; arrived 1010, dispatched 1210, done 1300.
    const r = buildResult({ id: 'r', model: 'm', createdAt: 1500 }, ctx, {
      status: 'ok',
      nowMs: 1300,
      timings: { queuedMs: 1010 - 1500, batchWaitMs: 200, deviceMs: 80 },
    });
    expect(r.timings.queuedMs).toBe(0);
    expect(r.timings.totalMs).toBeGreaterThanOrEqual(280);
  });

  it('never negative, and queuedMs + batchWaitMs + deviceMs <= totalMs, whatever the clocks say', () => {
    fc.assert(
      fc.property(
        fc.record({
          // The producer's clock may be far behind or ahead of the worker's.
          createdAt: fc.double({ min: 0, max: 4000, noNaN: true }),
          arrivedAt: fc.integer({ min: 1000, max: 2000 }),
          waitMs: fc.integer({ min: 0, max: 500 }),
          runMs: fc.integer({ min: 0, max: 500 }),
          // Device timings are float ms from the device's own events; the host clock is whole ms,
          // so a sub-ms batch can report more device time than the host saw pass.
          deviceMs: fc.double({ min: 0, max: 501, noNaN: true }),
        }),
        ({ createdAt, arrivedAt, waitMs, runMs, deviceMs }) => {
          const dispatchedAt = arrivedAt + waitMs;
          const doneAt = dispatchedAt + runMs;
          const r = buildResult({ id: 'r', model: 'm', createdAt }, ctx, {
            status: 'ok',
            nowMs: doneAt,
            timings: { queuedMs: arrivedAt - createdAt, batchWaitMs: dispatchedAt - arrivedAt, deviceMs: Math.min(deviceMs, runMs + 1) },
          });
          const t = r.timings;
          for (const v of Object.values(t)) expect(v).toBeGreaterThanOrEqual(0);
          expect(t.queuedMs + t.batchWaitMs + t.deviceMs).toBeLessThanOrEqual(t.totalMs + 1e-9);
          // Measured from createdAt whenever the clocks allow it.
          expect(t.totalMs).toBeGreaterThanOrEqual(Math.round((doneAt - createdAt) * 1000) / 1000);
        },
      ),
      { numRuns: 500 },
    );
  });
});
