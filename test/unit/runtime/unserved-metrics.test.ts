// npu_fleet_unserved_total on a real DeviceWorker: every kind of non-ok answer a worker gives is
// counted under its own code, as many times as it was answered, and adds up to
// npu_fleet_requests_total for each non-ok status.
import { afterEach, describe, expect, it } from 'vitest';
import type { RepositorySnapshot } from '../../../src/runtime/model-repository.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import type { TransportStartOptions } from '../../../src/transport/transport.ts';
import { MODEL, modelConfig, request, snapshotOf, snapshotWith, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});

/** snapshotOf('1') dropping superseded frames, with a queue of 3 items (soft = hard: p0 still flows at the soft limit). */
function smallQueueDropping(): RepositorySnapshot {
  return snapshotWith({ ...modelConfig, streams: { superseded: 'drop' }, queue: { ...modelConfig.queue, softLimitItems: 3, hardLimitItems: 3 } }, '1');
}

/** Every sample of `name` as labels → value. */
function series(text: string, name: string): Array<[Record<string, string>, number]> {
  const out: Array<[Record<string, string>, number]> = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const labels = Object.fromEntries([...line.slice(0, line.lastIndexOf('}')).matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    out.push([labels as Record<string, string>, Number(line.slice(line.lastIndexOf(' ') + 1))]);
  }
  return out;
}
const total = (text: string, name: string, where: (l: Record<string, string>) => boolean = () => true): number =>
  series(text, name).reduce((a, [l, v]) => (where(l) ? a + v : a), 0);

/** A transport that answers two requests on its own once started, as BullMQ's stall reaper does. */
class SelfAnsweringTransport extends MemoryTransport {
  override async start(options: TransportStartOptions): Promise<void> {
    await super.start(options);
    options.onAnswered?.(MODEL, 'WORKER_CRASHED');
    options.onAnswered?.(MODEL, 'NOT_A_FLEET_CODE');
  }
}

const base64Input = [{ name: 'input', dtype: 'float32', shape: [1, 64], data: Buffer.alloc(256).toString('base64') }];

describe('npu_fleet_unserved_total on a worker', () => {
  it('counts each non-ok answer once under its status and code, and agrees with npu_fleet_requests_total', async () => {
    h = await startWorker(smallQueueDropping());
    const { producer, executions, results } = h;

    // Both device slots busy: what is queued from here on stays queued.
    await producer.publish(request('busy1', 0));
    await until(() => executions.length === 1, 2000, 'the first slot taken');
    await producer.publish(request('busy2', 0));
    await until(() => executions.length === 2, 2000, 'both slots taken');

    // Answered at admission, never queued.
    const { inputs: _inputs, ...envelope } = request('x', 1);
    await producer.publish(request('stale', 1, { deadlineAt: Date.now() - 1000 }));
    await producer.publishRaw([
      { model: MODEL, body: { id: 'garbage', model: MODEL, replyTo: 'test.replies', inputs: 'not tensors' } },
      // Valid for the codec, naming a model nobody serves: its name must not become a label value.
      { model: MODEL, body: { ...envelope, id: 'ghost', model: 'ghost-model', inputs: base64Input } },
      { model: MODEL, body: { ...envelope, id: 'big-meta', inputs: base64Input, meta: { pad: 'x'.repeat(5000) } } },
    ]);
    await until(() => ['stale', 'garbage', 'ghost', 'big-meta'].every((id) => results.has(id)), 2000, 'the admission answers');

    // `waits` expires in the queue; f1 is displaced by f2 of its stream. One lane, in order: once
    // f1 is answered, f2 and `waits` are both queued.
    const t0 = Date.now();
    await producer.publish([
      request('waits', 1, { deadlineAt: t0 + 1000 }),
      request('f1', 1, { streamKey: 'cam1', createdAt: t0 }),
      request('f2', 1, { streamKey: 'cam1', createdAt: t0 + 1 }),
    ]);
    await until(() => results.has('f1'), 2000, 'f1 superseded');
    expect(results.has('waits')).toBe(false);
    // q1 fills the queue to its hard limit (3 items); q2 and q3 find it full.
    await producer.publish([request('q1', 0), request('q2', 0), request('q3', 0)]);
    await until(() => results.has('q2') && results.has('q3'), 2000, 'the queue-full answers');
    // Still queued when q2 and q3 arrived, so they found the queue full.
    expect(results.has('waits')).toBe(false);
    await until(() => results.has('waits'), 3000, 'the queue-expired answer');

    executions[0]?.fail(new Error('device fault (simulated)'));
    await until(() => results.has('busy1'), 2000, 'the failed batch answered');
    const all = ['busy1', 'busy2', 'stale', 'garbage', 'ghost', 'big-meta', 'f1', 'f2', 'waits', 'q1', 'q2', 'q3'];
    for (const end = Date.now() + 5000; !all.every((id) => results.has(id)); await new Promise((r) => setTimeout(r, 10))) {
      if (Date.now() > end) throw new Error(`not answered: ${all.filter((id) => !results.has(id)).join(', ')}`);
      for (const e of executions) e.release();
    }

    const answered = all.map((id) => {
      const [r, ...more] = results.get(id) ?? [];
      expect(more, id).toEqual([]);
      return `${id} ${r?.status} ${r?.error?.code ?? '-'}`;
    });
    expect(answered).toEqual([
      'busy1 failed DEVICE_ERROR',
      'busy2 ok -',
      'stale expired DEADLINE_EXCEEDED',
      'garbage invalid INVALID_MESSAGE',
      'ghost rejected UNKNOWN_MODEL',
      'big-meta invalid LIMIT_EXCEEDED',
      'f1 rejected SUPERSEDED',
      'f2 ok -',
      'waits expired DEADLINE_EXCEEDED',
      'q1 ok -',
      'q2 rejected QUEUE_FULL',
      'q3 rejected QUEUE_FULL',
    ]);

    // Counted once the broker settled them: wait for all twelve.
    let text = '';
    for (const end = Date.now() + 2000; total(text, 'npu_fleet_requests_total') !== all.length; await new Promise((r) => setTimeout(r, 10))) {
      if (Date.now() > end) throw new Error(`results counted: ${total(text, 'npu_fleet_requests_total')}`);
      text = await h.metrics.render();
    }
    const unserved = series(text, 'npu_fleet_unserved_total')
      .map(([l, v]) => `${l.model} ${l.status} ${l.code} ${v}`)
      .sort();
    expect(unserved).toEqual(
      [
        `${MODEL} expired DEADLINE_EXCEEDED 2`,
        `${MODEL} failed DEVICE_ERROR 1`,
        `${MODEL} invalid INVALID_MESSAGE 1`,
        `${MODEL} invalid LIMIT_EXCEEDED 1`,
        `${MODEL} rejected QUEUE_FULL 2`,
        `${MODEL} rejected SUPERSEDED 1`,
        `${MODEL} rejected UNKNOWN_MODEL 1`,
      ].sort(),
    );
    for (const status of ['expired', 'rejected', 'invalid', 'failed']) {
      expect(total(text, 'npu_fleet_unserved_total', (l) => l.status === status), status).toBe(
        total(text, 'npu_fleet_requests_total', (l) => l.status === status),
      );
    }
    // Served (busy2 ran past execTimeoutMs while `waits` expired: late), so not unserved.
    expect(total(text, 'npu_fleet_requests_total', (l) => l.status === 'ok' || l.status === 'late')).toBe(3);
    // The one code DEADLINE_EXCEEDED covers both stages; the deadline-miss counter tells them apart.
    expect(series(text, 'npu_fleet_deadline_misses_total').map(([l, v]) => `${l.stage} ${v}`).sort()).toEqual(['admission 1', 'queue 1']);
  });

  it('counts what the transport answered itself (failed, its dead-letter reason as the code) with npu_fleet_requests_total', async () => {
    h = await startWorker(snapshotOf('1'), {}, (broker) => new SelfAnsweringTransport({ broker }));
    const text = await h.metrics.render();
    expect(series(text, 'npu_fleet_unserved_total').map(([l, v]) => `${l.model} ${l.status} ${l.code} ${v}`).sort()).toEqual([
      `${MODEL} failed OTHER 1`,
      `${MODEL} failed WORKER_CRASHED 1`,
    ]);
    expect(total(text, 'npu_fleet_requests_total', (l) => l.status === 'failed')).toBe(2);
  });
});
