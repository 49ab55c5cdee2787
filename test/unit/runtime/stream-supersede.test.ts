// The worker's side of streams.superseded: drop: a queued frame displaced by a newer one of its
// stream is answered (with the deliveries riding on it) at once, a late older frame on arrival,
// and neither takes device time.
import { afterEach, describe, expect, it } from 'vitest';
import type { RepositorySnapshot } from '../../../src/runtime/model-repository.ts';
import { modelConfig, request, snapshotWith, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});

/** snapshotOf('1'), its model set to drop superseded frames. */
const dropping = (): RepositorySnapshot => snapshotWith({ ...modelConfig, streams: { superseded: 'drop' } }, '1');

const frame = (id: string, createdAt: number) => request(id, 1, { streamKey: 'cam1', createdAt });

describe('a worker whose model drops superseded frames', () => {
  it('answers the displaced frame and its redelivery SUPERSEDED, and a late older frame on arrival; only the newest runs', async () => {
    h = await startWorker(dropping());
    const { producer, executions, results } = h;
    // Both device slots busy: the frames stay queued.
    await producer.publish(request('busy1', 0));
    await until(() => executions.length === 1, 2000, 'the first slot taken');
    await producer.publish(request('busy2', 0));
    await until(() => executions.length === 2, 2000, 'both slots taken');
    const t0 = Date.now();
    await producer.publish(frame('f1', t0 + 1));
    await producer.publish(frame('f1', t0 + 1)); // a redelivery while it is queued: rides along
    await producer.publish(frame('f2', t0 + 2));
    await until(() => (results.get('f1')?.length ?? 0) === 2, 2000, 'both deliveries of f1 answered');
    for (const r of results.get('f1') ?? []) {
      expect(r.status).toBe('rejected');
      expect(r.error?.code).toBe('SUPERSEDED');
      expect(r.error?.message).toContain('request f2 of stream "cam1"');
      expect(r.device).toBe(-1);
    }
    await producer.publish(frame('f0', t0 - 50)); // older than the queued f2, created 50 ms before
    await until(() => results.has('f0'), 2000, 'the late older frame answered');
    expect(results.get('f0')?.map((r) => [r.status, r.error?.code])).toEqual([['rejected', 'SUPERSEDED']]);
    // Its timings say how long it took to arrive, as any answer given on arrival does.
    expect(results.get('f0')?.[0]?.timings.queuedMs).toBeGreaterThanOrEqual(50);
    expect(results.has('f2')).toBe(false);
    for (const e of executions) e.release();
    await until(() => executions.length === 3, 2000, "f2's batch on the device");
    executions[2]?.release();
    await until(() => results.has('f2'), 2000, 'the newest frame served');
    expect(results.get('f2')?.map((r) => r.status)).toEqual(['ok']);
    expect(executions[2]?.gear).toBe(1);
    // busy1, busy2 and f2's batch: the superseded frames never reached the device.
    expect(executions).toHaveLength(3);
    // Counted as rejections once settled, one per delivery (f1 twice, f0).
    const rejected = async (): Promise<string | undefined> =>
      (await h?.metrics.render())?.split('\n').find((l) => l.startsWith('npu_fleet_requests_total{') && l.includes('status="rejected"'));
    let line: string | undefined;
    for (const end = Date.now() + 2000; Date.now() < end; await new Promise((r) => setTimeout(r, 20))) {
      line = await rejected();
      if (line?.endsWith(' 3')) break;
    }
    expect(line).toMatch(/ 3$/);
  });
});
