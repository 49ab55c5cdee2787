import { afterEach, describe, expect, it, vi } from 'vitest';
import { request, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  vi.useRealTimers();
  await stopWorker(h);
  h = undefined;
});

/**
 * A batch of one item is estimated at the prior, 5 + 0.5 × 1 = 5.5 ms. The test stops the worker's
 * clocks, dispatches one batch, moves the clock 1.1 s on (past the urgent window, far past that
 * estimate) without the batch finishing, and sends one more request due `dueInMs` from then.
 * Behind the running batch it starts no sooner than ~5.5 ms from now and needs 5.5 ms itself.
 */
const cases = [
  // Judged as if the device were free now (5.5 <= 8), it went into the second slot and ended late.
  { name: 'a bulk request that cannot make it behind the running batch is expired', priority: 1, dueInMs: 8, executions: 1, status: 'expired' },
  { name: 'an urgent request that cannot make it behind the running batch is expired', priority: 0, dueInMs: 8, executions: 1, status: 'expired' },
  // Control: urgent work that makes its deadline behind the running batch still goes at once.
  { name: 'an urgent request that makes it behind the running batch goes to the second slot', priority: 0, dueInMs: 30, executions: 2, status: undefined },
];

describe('a batch running past its estimated end keeps the device busy', () => {
  it.each(cases)('$name', async ({ priority, dueInMs, executions, status }) => {
    h = await startWorker(snapshotOf('1'));
    // Both of the worker's clocks stand still until the test moves them on together (not a step).
    vi.useFakeTimers({ toFake: ['Date', 'performance'] });
    vi.setSystemTime(Date.now());
    await h.producer.publish(request('overrunning', 0));
    await until(() => h!.executions.length === 1, 2000, 'the first batch on the device');
    vi.advanceTimersByTime(1100);
    const t1 = Date.now();
    await h.producer.publish(request('late-comer', priority, { deadlineAt: t1 + dueInMs }));
    await until(() => h!.results.has('late-comer') || h!.executions.length === 2, 2000, 'the late-comer answered or dispatched');
    await new Promise((r) => setTimeout(r, 50));
    expect(h.executions).toHaveLength(executions);
    expect(h.results.get('late-comer')?.map((r) => r.status)[0]).toBe(status);
  });
});
