// Latest frame wins against frames already sent to the device (streamSuperseded: 'drop'): an older
// frame of a stream arriving after a newer one was dispatched is refused as superseded, within
// SERVED_FRAME_MEMORY_MS of that dispatch; memory stays bounded by SERVED_STREAMS_MAX.
import { describe, expect, it } from 'vitest';
import { BatchScheduler, type EnqueueResult, type SchedulerOptionsInput, type SchedulerRequest } from '../../../src/scheduler/index.ts';
import { SERVED_FRAME_MEMORY_MS, SERVED_STREAMS_MAX, ServedFrames } from '../../../src/scheduler/stream-served.ts';
import { ids, req } from './scheduler-fixtures.ts';

const frame = (id: string, key: string, made: number, arrivedAt: number): SchedulerRequest<string> => ({
  ...req({ id, priority: 0, at: arrivedAt }),
  streamKey: key,
  createdAt: made,
});

/** Level 0 leaves at once: each decide dispatches what is queued. */
const base: SchedulerOptionsInput = { priorityLevels: 1, maxQueueDelayMs: [0], agingMs: null, maxBatchSize: 8, streamSuperseded: 'drop' };

function outcome(r: EnqueueResult<string>): string {
  if (r.kind === 'rejected') return r.reason === 'superseded' ? 'superseded' : `rejected:${r.reason}`;
  return r.superseded === undefined ? 'ok' : `ok-/${ids(r.superseded).join(',')}`;
}

function dispatch(s: BatchScheduler<string>, nowMs: number): string[] {
  const d = s.decide(nowMs);
  return d.kind === 'dispatch' ? ids(d.batch.members) : [];
}

describe('streamSuperseded drop: frames older than one already served', () => {
  it('are refused on arrival, SUPERSEDED naming the served frame, counted as superseded', () => {
    const s = new BatchScheduler<string>(base);
    expect(outcome(s.enqueue(frame('cam0-f5', 'cam0', 105, 0)))).toBe('ok');
    expect(dispatch(s, 1)).toEqual(['cam0-f5']);
    const r = s.enqueue(frame('cam0-f3', 'cam0', 103, 2));
    expect(outcome(r)).toBe('superseded');
    if (r.kind !== 'rejected') return;
    expect(r.error.code).toBe('SUPERSEDED');
    expect(r.error.retriable).toBe(false);
    expect(r.error.message).toContain('superseded by request cam0-f5 of stream "cam0"');
    expect(r.error.details).toMatchObject({ requestId: 'cam0-f3', supersededBy: 'cam0-f5', streamKey: 'cam0' });
    expect(s.stats(2)).toMatchObject({ rejectedRequests: 1, supersededRequests: 1 });
    expect(s.queuedRequests).toBe(0);
  });

  it('newer frames, a tie (the later arrival is the newer) and other streams are served', () => {
    const s = new BatchScheduler<string>(base);
    s.enqueue(frame('a5', 'a', 105, 0));
    expect(dispatch(s, 1)).toEqual(['a5']);
    expect(outcome(s.enqueue(frame('a5b', 'a', 105, 2)))).toBe('ok');
    expect(outcome(s.enqueue(frame('b1', 'b', 101, 2)))).toBe('ok');
    expect(dispatch(s, 3).sort()).toEqual(['a5b', 'b1']);
    expect(outcome(s.enqueue(frame('a6', 'a', 106, 4)))).toBe('ok');
    expect(outcome(s.enqueue(frame('b0', 'b', 100, 4)))).toBe('superseded');
  });

  it('the newest dispatched frame of a stream counts, not the last one dispatched', () => {
    const s = new BatchScheduler<string>(base);
    s.enqueue(frame('a5', 'a', 105, 0));
    dispatch(s, 1);
    // Let in past the memory, then dispatched: it must not lower the mark set by a5 (re-served below).
    s.enqueue(frame('a4', 'a', 104, 2 + SERVED_FRAME_MEMORY_MS));
    s.enqueue(frame('a7', 'a', 107, 3 + SERVED_FRAME_MEMORY_MS));
    expect(dispatch(s, 4 + SERVED_FRAME_MEMORY_MS)).toEqual(['a7']);
    expect(outcome(s.enqueue(frame('a6', 'a', 106, 5 + SERVED_FRAME_MEMORY_MS)))).toBe('superseded');
  });

  it(`are served again ${SERVED_FRAME_MEMORY_MS} ms after the newer frame left (a producer clock behind loses at most that)`, () => {
    const s = new BatchScheduler<string>(base);
    s.enqueue(frame('a5', 'a', 105, 0));
    dispatch(s, 10);
    expect(outcome(s.enqueue(frame('a3', 'a', 103, 10 + SERVED_FRAME_MEMORY_MS)))).toBe('superseded');
    expect(outcome(s.enqueue(frame('a2', 'a', 102, 11 + SERVED_FRAME_MEMORY_MS)))).toBe('ok');
  });

  it("policy 'serve' serves them, and a reconfigure to 'serve' forgets what was served", () => {
    const serve = new BatchScheduler<string>({ ...base, streamSuperseded: 'serve' });
    serve.enqueue(frame('a5', 'a', 105, 0));
    dispatch(serve, 1);
    expect(outcome(serve.enqueue(frame('a3', 'a', 103, 2)))).toBe('ok');

    const s = new BatchScheduler<string>(base);
    s.enqueue(frame('a5', 'a', 105, 0));
    dispatch(s, 1);
    s.reconfigure({ streamSuperseded: 'serve' }, 2);
    s.reconfigure({ streamSuperseded: 'drop' }, 3);
    expect(outcome(s.enqueue(frame('a3', 'a', 103, 4)))).toBe('ok');
  });

  it(`remembers at most ${SERVED_STREAMS_MAX} streams, the least recently served going first`, () => {
    const served = new ServedFrames();
    const n = SERVED_STREAMS_MAX + 100;
    for (let k = 0; k < n; k++) served.dispatched([frame(`s${k}-f1`, `s${k}`, 1_000, k)], 1);
    expect(served.size).toBe(SERVED_STREAMS_MAX);
    // The first 100 were dropped: their older frames are let in; a remembered one is refused.
    expect(served.refusal(frame('s0-f0', 's0', 999, 2), 2)).toBeNull();
    expect(served.refusal(frame(`s${n - 1}-f0`, `s${n - 1}`, 999, 2), 2)?.code).toBe('SUPERSEDED');
    // And none outlives the memory: the next dispatch prunes them all.
    served.dispatched([frame('x-f1', 'x', 1, 0)], 2 + SERVED_FRAME_MEMORY_MS);
    expect(served.size).toBe(1);
  });
});
