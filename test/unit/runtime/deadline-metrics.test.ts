import { afterEach, describe, expect, it } from 'vitest';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import type { Outcome } from '../../../src/transport/transport.ts';
import { MODEL, request, sample, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

/** A broker that takes `ms` to accept each publish (a slow or distant broker). */
class SlowPublishTransport extends MemoryTransport {
  constructor(
    options: ConstructorParameters<typeof MemoryTransport>[0],
    private readonly ms: number,
  ) {
    super(options);
  }

  override async settle(outcomes: readonly Outcome[]): Promise<void> {
    await new Promise((r) => setTimeout(r, this.ms));
    return super.settle(outcomes);
  }
}

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});


describe('deadline and latency metrics count what happened to each request', () => {
  it('a request already past its deadline when it reaches the worker is a miss at admission, not in the local queue', async () => {
    h = await startWorker(snapshotOf('1'));
    await h.producer.publish(request('stale', 1, { deadlineAt: Date.now() - 1000 }));
    await until(() => h!.results.has('stale'), 2000, 'the expired answer');
    expect(h.results.get('stale')).toMatchObject([{ status: 'expired' }]);
    await new Promise((r) => setTimeout(r, 20));
    const text = await h.metrics.render();
    expect(sample(text, 'npu_fleet_deadline_misses_total', { model: MODEL, stage: 'admission' })).toBe(1);
    expect(sample(text, 'npu_fleet_deadline_misses_total', { model: MODEL, stage: 'queue' })).toBe(0);
  });

  it('a batch past execTimeoutMs delivers its members late, but only a member whose own deadline passed is a deadline miss', async () => {
    h = await startWorker(snapshotOf('1'));
    const now = Date.now();
    // Both in one batch: no deadline, and a deadline the overrun passes.
    await h.producer.publish([request('no-deadline', 1), request('due', 1, { deadlineAt: now + 300 })]);
    await until(() => h!.executions.length === 1, 2000, 'the batch on the device');
    // The model's execTimeoutMs is 1000 ms: hold the batch past it, then let it finish.
    await new Promise((r) => setTimeout(r, 1100));
    h.executions[0]?.release();
    await until(() => h!.results.has('no-deadline') && h!.results.has('due'), 2000, 'both late results');
    expect(h.results.get('no-deadline')).toMatchObject([{ status: 'ok', late: true }]);
    expect(h.results.get('due')).toMatchObject([{ status: 'ok', late: true }]);
    await new Promise((r) => setTimeout(r, 20));
    const text = await h.metrics.render();
    expect(sample(text, 'npu_fleet_deadline_misses_total', { model: MODEL, stage: 'device' })).toBe(1);
    expect(sample(text, 'npu_fleet_wasted_device_seconds_total', { model: MODEL, reason: 'late' })).toBeGreaterThan(0);
  });

  it('wasted device seconds are execute seconds as npu_fleet_device_execute_seconds counts them: a late request alone in its batch wastes all of it, and none of the copies', async () => {
    h = await startWorker(snapshotOf('1'));
    await h.producer.publish(request('late-alone', 1, { deadlineAt: Date.now() + 100 }));
    await until(() => h!.executions.length === 1, 2000, 'the batch on the device');
    expect(h.executions[0]?.gear).toBe(1);
    await new Promise((r) => setTimeout(r, 200));
    h.executions[0]?.release();
    await until(() => h!.results.has('late-alone'), 2000, 'the late result');
    expect(h.results.get('late-alone')).toMatchObject([{ status: 'ok', late: true }]);
    await new Promise((r) => setTimeout(r, 20));
    const text = await h.metrics.render();
    const executed = sample(text, 'npu_fleet_device_execute_seconds_sum', { model: MODEL });
    expect(executed).toBeCloseTo(0.001, 9);
    // Counting the harness device's copies too (0.1 ms each way) made it 0.0012: more than the device executed.
    expect(sample(text, 'npu_fleet_wasted_device_seconds_total', { model: MODEL, reason: 'late' })).toBeCloseTo(executed, 9);
  });

  it('a message without a createdAt (undecodable) adds no end-to-end latency sample', async () => {
    h = await startWorker(snapshotOf('1'));
    await h.producer.publishRaw([{ model: MODEL, body: { id: 'garbage', model: MODEL, replyTo: 'test.replies', inputs: 'not tensors' } }]);
    await until(() => h!.results.has('garbage'), 2000, 'the invalid answer');
    expect(h.results.get('garbage')).toMatchObject([{ status: 'invalid' }]);
    await new Promise((r) => setTimeout(r, 20));
    const text = await h.metrics.render();
    expect(sample(text, 'npu_fleet_requests_total', { model: MODEL, status: 'invalid' })).toBe(1);
    expect(sample(text, 'npu_fleet_end_to_end_latency_seconds_count')).toBe(0);
  });

  it('queue wait is observed for requests that expired in the local queue too, not only for those served', async () => {
    h = await startWorker(snapshotOf('1'));
    // Both device slots busy, so the next request waits in the queue until its deadline passes.
    await h.producer.publish(request('slow-1', 0));
    await until(() => h!.executions.length === 1, 2000, 'the first batch');
    await h.producer.publish(request('slow-2', 0));
    await until(() => h!.executions.length === 2, 2000, 'both slots taken');
    await h.producer.publish(request('waits', 1, { deadlineAt: Date.now() + 100 }));
    await until(() => h!.results.has('waits'), 2000, 'the expired answer');
    expect(h.results.get('waits')).toMatchObject([{ status: 'expired' }]);
    await new Promise((r) => setTimeout(r, 20));
    const text = await h.metrics.render();
    expect(sample(text, 'npu_fleet_queue_wait_seconds_count', { model: MODEL, priority: '1' })).toBe(1);
    expect(sample(text, 'npu_fleet_deadline_misses_total', { model: MODEL, stage: 'queue' })).toBe(1);
  });

  it('a result the device finished in time but the broker took past its deadline is a miss at publish', async () => {
    h = await startWorker(snapshotOf('1'), {}, (broker) => new SlowPublishTransport({ broker }, 300));
    await h.producer.publish([request('in-time', 1, { deadlineAt: Date.now() + 150 }), request('no-deadline', 1)]);
    await until(() => h!.executions.length === 1, 2000, 'the batch on the device');
    h.executions[0]?.release();
    await until(() => h!.results.has('in-time') && h!.results.has('no-deadline'), 3000, 'both results');
    expect(h.results.get('in-time')).toMatchObject([{ status: 'ok' }]);
    expect(h.results.get('in-time')?.[0]?.late).toBeUndefined();
    await new Promise((r) => setTimeout(r, 20));
    const text = await h.metrics.render();
    expect(sample(text, 'npu_fleet_deadline_misses_total', { model: MODEL, stage: 'publish' })).toBe(1);
    expect(sample(text, 'npu_fleet_deadline_misses_total', { model: MODEL, stage: 'device' })).toBe(0);
  });
});
