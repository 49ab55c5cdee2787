import { afterEach, describe, expect, it, vi } from 'vitest';
import { request, snapshotOf, startWorker, stopWorker, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  vi.useRealTimers();
  await stopWorker(h);
  h = undefined;
});

/** 32 samples: gear 32, whose estimate before any batch is the prior, 5 + 0.5 × 32 = 21 ms. */
const full = (id: string, deadlineAt: number, extra: { version?: string } = {}) =>
  request(id, 0, { deadlineAt, inputs: [{ name: 'input', dtype: 'float32', shape: [32, 64], data: new Uint8Array(32 * 64 * 4) }], ...extra });

describe('one scheduling pass over several lanes', () => {
  it("a batch of the second lane is judged from when the device frees up after the first lane's batch", async () => {
    h = await startWorker(snapshotOf('1'));
    // The worker's clocks stand still (timers still run): admission and scheduling see one instant,
    // however slowly this machine gets there. Both: a wall clock standing still while the monotonic
    // one runs is a wall clock stepping back.
    const t0 = Date.now();
    vi.useFakeTimers({ toFake: ['Date', 'performance'] });
    vi.setSystemTime(t0);
    // Two lanes (the default one and the one pinned to version 1), each one request due in 30 ms:
    // either makes it alone (21 ms), not both one after the other (42 ms).
    await h.producer.publish([full('default-lane', t0 + 30), full('pinned-lane', t0 + 30, { version: '1' })]);
    for (let i = 0; i < 100 && h.results.size + h.executions.length < 2; i++) await new Promise((r) => setTimeout(r, 10));
    await new Promise((r) => setTimeout(r, 50));
    // The device got one of them; the other could not make its deadline behind it and is expired
    // without device time (it was sent into the second slot, judged as if it started at once).
    expect(h.executions).toHaveLength(1);
    const expired = [...h.results.values()].flat();
    expect(expired.map((r) => [r.status, r.device])).toEqual([['expired', -1]]);
  });
});
