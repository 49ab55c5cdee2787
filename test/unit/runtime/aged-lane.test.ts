import { afterEach, describe, expect, it } from 'vitest';
import { request, snapshotWith, modelConfig, startWorker, stopWorker, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});

describe('aging across lanes', () => {
  it('bulk work of one lane that has waited past its aging bound is served under sustained urgent traffic in another', async () => {
    // The scheduler's agingMs is 1 s: a priority-2 request is overdue after 3 s.
    h = await startWorker(snapshotWith(modelConfig, '1'));
    await h.producer.publish(request('bulk', 2, { version: '1' }));
    const started = Date.now();
    let n = 0;
    let released = 0;
    // Urgent requests keep arriving faster than the device serves them: one is always queued.
    while (!h.results.has('bulk') && Date.now() - started < 6000) {
      await h.producer.publish([request(`u${n++}`, 0), request(`u${n++}`, 0)]);
      await new Promise((r) => setTimeout(r, 2));
      // The device finishes its oldest batch whenever both slots are taken: it is never idle.
      if (h.executions.length - released >= 2) (h.executions[released++] as { release(): void }).release();
    }
    expect(h.results.get('bulk')).toMatchObject([{ status: 'ok' }]);
    // Served soon after it became overdue (3 s), not only when the urgent traffic stopped.
    expect(Date.now() - started).toBeLessThan(4500);
  });
});
