import { afterEach, describe, expect, it, vi } from 'vitest';
import { request, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  vi.useRealTimers();
  await stopWorker(h);
  h = undefined;
});

const STEP_BACK_MS = 2000;

/**
 * The worker's clocks are faked (Date and performance.now, no timers): they advance with real
 * time in 1 ms ticks, and the test steps the wall clock alone, as NTP or a VM resume does.
 */
async function fakeClocks(): Promise<{ stepWall(ms: number): void; stop(): void }> {
  vi.useFakeTimers({ toFake: ['Date', 'performance'] });
  vi.setSystemTime(Date.now());
  const ticker = setInterval(() => vi.advanceTimersByTime(1), 1);
  return { stepWall: (ms) => vi.setSystemTime(Date.now() + ms), stop: () => clearInterval(ticker) };
}

describe('a wall-clock step backwards', () => {
  it('does not hold a queued batch past its fill delay (lowest priority: 20 ms)', async () => {
    h = await startWorker(snapshotOf('1'));
    const clocks = await fakeClocks();
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
