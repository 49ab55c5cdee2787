import { afterEach, describe, expect, it } from 'vitest';
import { MODEL, request, sample, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});


describe('a redelivery that arrives past its deadline while the request is held here', () => {
  it('rides along with the held request: one result for the id, one deadline miss', async () => {
    h = await startWorker(snapshotOf('1'));
    const due = Date.now() + 150;
    const original = request('retried', 1, { deadlineAt: due });
    await h.producer.publish(original);
    await until(() => h!.executions.length === 1, 2000, 'the first delivery on the device');
    // The producer gives up waiting and sends the same request again, after its deadline.
    await new Promise((r) => setTimeout(r, Math.max(0, due - Date.now()) + 20));
    await h.producer.publish({ ...original });
    await new Promise((r) => setTimeout(r, 50));
    h.executions[0]?.release();
    await until(() => (h!.results.get('retried')?.length ?? 0) === 2, 2000, 'both deliveries answered');
    // Both deliveries get the one run's result, not an `expired` for one and `ok` for the other.
    expect(h.results.get('retried')?.map((r) => [r.status, r.late])).toEqual([
      ['ok', true],
      ['ok', true],
    ]);
    expect(h.executions).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 20));
    const text = await h.metrics.render();
    expect(sample(text, 'npu_fleet_deadline_misses_total', { model: MODEL })).toBe(1);
    expect(sample(text, 'npu_fleet_deadline_misses_total', { model: MODEL, stage: 'device' })).toBe(1);
  });
});
