import { afterEach, describe, expect, it, vi } from 'vitest';
import { fakeClocks } from './fake-clocks.ts';
import { request, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  vi.useRealTimers();
  await stopWorker(h);
  h = undefined;
});

const STEP_BACK_MS = 2000;

describe('a wall-clock step backwards', () => {
  it('does not hold a queued batch past its fill delay (lowest priority: 20 ms)', async () => {
    h = await startWorker(snapshotOf('1'));
    const clocks = fakeClocks();
    try {
      const startedAt = performance.now();
      await h.producer.publish(request('bulk', 2));
      // Delivered (setImmediate), admitted and its 20 ms wait armed; then the wall clock steps back.
      await new Promise((r) => setTimeout(r, 5));
      clocks.stepWall(-STEP_BACK_MS);
      await until(() => h!.executions.length === 1, 5000, 'the batch on the device');
      // Before: it waited its 20 ms plus the 2 s the wall clock stepped back.
      expect(performance.now() - startedAt).toBeLessThan(STEP_BACK_MS / 2);
    } finally {
      clocks.stop();
    }
  });
});

describe('a wall-clock step backwards while a batch runs', () => {
  it('does not teach the scheduler a near-zero device time', async () => {
    h = await startWorker(snapshotOf('1'));
    const clocks = fakeClocks();
    try {
      await h.producer.publish(request('measured', 0));
      await until(() => h!.executions.length === 1, 2000, 'the batch on the device');
      // Runs 50 ms (the fake device reports 1.2 ms of device time), across a 2 s step back.
      vi.advanceTimersByTime(50);
      clocks.stepWall(-STEP_BACK_MS);
      h.executions[0]?.release();
      await until(() => h!.results.has('measured'), 2000, 'the measured result');
      // A gear-1 batch takes 1.2 ms: a request due in 1 ms cannot make it and is expired. Before,
      // the service time read 50 - 2000 ms, was clamped to 0.01 ms and learnt as the estimate.
      // (The clocks stand still from here: the request is not already late when admitted.)
      clocks.stop();
      await h.producer.publish(request('tight', 0, { deadlineAt: Date.now() + 1 }));
      await until(() => h!.results.has('tight') || h!.executions.length === 2, 2000, 'the tight request answered or dispatched');
      expect(h.executions).toHaveLength(1);
      expect(h.results.get('tight')?.map((r) => r.status)).toEqual(['expired']);
    } finally {
      clocks.stop();
    }
  });
});
