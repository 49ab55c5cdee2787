// Latest frame wins (streamSuperseded: 'drop'): at most one queued request per streamKey, the
// newest by createdAt; dispatched requests are never touched, and the per-key map holds only
// queued requests.
import { describe, expect, it } from 'vitest';
import { BatchScheduler, type EnqueueResult, type SchedulerOptionsInput, type SchedulerRequest } from '../../../src/scheduler/index.ts';
import { ManualClock, ids, req } from './scheduler-fixtures.ts';

interface Frame {
  id: string;
  /** streamKey; none: an ordinary request */
  key?: string;
  /** createdAt; none: arrival orders */
  made?: number;
  priority?: number;
  deadlineAt?: number;
}

const frame = (f: Frame, arrivedAt: number): SchedulerRequest<string> => ({
  ...req({ id: f.id, priority: f.priority ?? 0, at: arrivedAt, deadlineAt: f.deadlineAt }),
  streamKey: f.key,
  createdAt: f.made,
});

/** Nothing leaves on age: only the cases that call decide dispatch. */
const base: SchedulerOptionsInput = { priorityLevels: 2, maxQueueDelayMs: [null, null], agingMs: null, maxBatchSize: 8, streamSuperseded: 'drop' };

/** An enqueue's outcome: 'ok', 'ok-/<id>' (accepted, displacing <id>) or 'superseded' (refused). */
function outcome(r: EnqueueResult<string>): string {
  if (r.kind === 'rejected') return r.reason === 'superseded' ? 'superseded' : `rejected:${r.reason}`;
  return r.superseded === undefined ? 'ok' : `ok-/${ids(r.superseded).join(',')}`;
}

type Step = { enqueue: Frame; expect: string } | { dispatch: string[] };

interface Case {
  name: string;
  options?: SchedulerOptionsInput;
  steps: Step[];
  queued: string[];
  superseded: number;
  streams: number;
}

const cases: Case[] = [
  {
    name: 'a newer frame displaces the queued one of its stream',
    steps: [
      { enqueue: { id: 'a1', key: 'a', made: 1 }, expect: 'ok' },
      { enqueue: { id: 'a2', key: 'a', made: 2 }, expect: 'ok-/a1' },
      { enqueue: { id: 'a3', key: 'a', made: 3 }, expect: 'ok-/a2' },
    ],
    queued: ['a3'],
    superseded: 2,
    streams: 1,
  },
  {
    name: 'an older frame arriving late is superseded on arrival; the newer one stays',
    steps: [
      { enqueue: { id: 'a2', key: 'a', made: 2 }, expect: 'ok' },
      { enqueue: { id: 'a1', key: 'a', made: 1 }, expect: 'superseded' },
    ],
    queued: ['a2'],
    superseded: 1,
    streams: 1,
  },
  {
    name: 'same createdAt: the later arrival is the newer',
    steps: [
      { enqueue: { id: 'first', key: 'a', made: 5 }, expect: 'ok' },
      { enqueue: { id: 'second', key: 'a', made: 5 }, expect: 'ok-/first' },
    ],
    queued: ['second'],
    superseded: 1,
    streams: 1,
  },
  {
    name: 'different streams are independent',
    steps: [
      { enqueue: { id: 'a1', key: 'a', made: 1 }, expect: 'ok' },
      { enqueue: { id: 'b1', key: 'b', made: 1 }, expect: 'ok' },
      { enqueue: { id: 'b2', key: 'b', made: 2 }, expect: 'ok-/b1' },
      { enqueue: { id: 'c1', key: 'c', made: 0 }, expect: 'ok' },
      { enqueue: { id: 'a2', key: 'a', made: 2 }, expect: 'ok-/a1' },
    ],
    queued: ['a2', 'b2', 'c1'],
    superseded: 2,
    streams: 3,
  },
  {
    name: 'requests without a streamKey are unaffected',
    steps: [
      { enqueue: { id: 'x1', made: 1 }, expect: 'ok' },
      { enqueue: { id: 'x2', made: 2 }, expect: 'ok' },
      { enqueue: { id: 'a1', key: 'a', made: 3 }, expect: 'ok' },
      { enqueue: { id: 'x0', made: 0 }, expect: 'ok' },
    ],
    queued: ['a1', 'x0', 'x1', 'x2'],
    superseded: 0,
    streams: 1,
  },
  {
    name: 'a dispatched frame is never touched: the next one of its stream is simply queued',
    options: { maxQueueDelayMs: [0, 0] },
    steps: [
      { enqueue: { id: 'a1', key: 'a', made: 1 }, expect: 'ok' },
      { dispatch: ['a1'] },
      { enqueue: { id: 'a2', key: 'a', made: 2 }, expect: 'ok' },
      { enqueue: { id: 'a3', key: 'a', made: 3 }, expect: 'ok-/a2' },
    ],
    queued: ['a3'],
    superseded: 1,
    streams: 1,
  },
  {
    name: 'without createdAt, arrival orders the frames',
    steps: [
      { enqueue: { id: 'a1', key: 'a' }, expect: 'ok' },
      { enqueue: { id: 'a2', key: 'a' }, expect: 'ok-/a1' },
    ],
    queued: ['a2'],
    superseded: 1,
    streams: 1,
  },
  {
    name: 'the stream spans priority levels: a newer frame at another level still displaces',
    steps: [
      { enqueue: { id: 'a1', key: 'a', made: 1, priority: 1 }, expect: 'ok' },
      { enqueue: { id: 'a2', key: 'a', made: 2, priority: 0 }, expect: 'ok-/a1' },
    ],
    queued: ['a2'],
    superseded: 1,
    streams: 1,
  },
  {
    name: "policy 'serve' (the default) queues every frame",
    options: { streamSuperseded: 'serve' },
    steps: [
      { enqueue: { id: 'a1', key: 'a', made: 1 }, expect: 'ok' },
      { enqueue: { id: 'a2', key: 'a', made: 2 }, expect: 'ok' },
      { enqueue: { id: 'a0', key: 'a', made: 0 }, expect: 'ok' },
    ],
    queued: ['a0', 'a1', 'a2'],
    superseded: 0,
    streams: 0,
  },
];

describe('BatchScheduler streamSuperseded', () => {
  it.each(cases)('$name', (c) => {
    const clock = new ManualClock(100);
    const s = new BatchScheduler<string>({ ...base, ...c.options });
    for (const step of c.steps) {
      const at = clock.advance(1);
      if ('dispatch' in step) {
        const d = s.decide(at);
        expect(d.kind).toBe('dispatch');
        if (d.kind === 'dispatch') expect(ids(d.batch.members)).toEqual(step.dispatch);
        continue;
      }
      expect(outcome(s.enqueue(frame(step.enqueue, at))), step.enqueue.id).toBe(step.expect);
    }
    expect(s.queuedStreams).toBe(c.streams);
    expect(s.stats(clock.nowMs).supersededRequests).toBe(c.superseded);
    expect(ids(s.drain()).sort()).toEqual(c.queued);
    expect(s.queuedStreams).toBe(0);
  });

  it("the default is 'serve'", () => {
    const s = new BatchScheduler<string>({});
    expect(s.options.streamSuperseded).toBe('serve');
    s.enqueue(frame({ id: 'a1', key: 'a', made: 1 }, 0));
    expect(outcome(s.enqueue(frame({ id: 'a2', key: 'a', made: 2 }, 0)))).toBe('ok');
    expect(s.queuedRequests).toBe(2);
  });

  it('a refusal on arrival is SUPERSEDED, not retriable, and names the newer request and the stream', () => {
    const s = new BatchScheduler<string>(base);
    s.enqueue(frame({ id: 'cam7-f2', key: 'cam7', made: 2 }, 0));
    const r = s.enqueue(frame({ id: 'cam7-f1', key: 'cam7', made: 1 }, 1));
    expect(r.kind).toBe('rejected');
    if (r.kind !== 'rejected') return;
    expect(r.error.code).toBe('SUPERSEDED');
    expect(r.error.retriable).toBe(false);
    expect(r.error.message).toContain('cam7-f2');
    expect(r.error.message).toContain('"cam7"');
    expect(r.error.details).toMatchObject({ requestId: 'cam7-f1', supersededBy: 'cam7-f2', streamKey: 'cam7' });
    expect(s.stats(1).rejectedRequests).toBe(1);
  });

  it('the displaced request is handed back whole, and the queue counts only the newer one', () => {
    const s = new BatchScheduler<string>(base);
    s.enqueue({ ...frame({ id: 'a1', key: 'a', made: 1 }, 0), items: 3, bytes: 300 });
    const r = s.enqueue({ ...frame({ id: 'a2', key: 'a', made: 2 }, 1), items: 2, bytes: 200 });
    expect(r.kind).toBe('accepted');
    if (r.kind === 'rejected') return;
    expect(r.superseded).toHaveLength(1);
    expect(r.superseded?.[0]).toMatchObject({ id: 'a1', payload: 'a1', items: 3, streamKey: 'a', createdAt: 1 });
    expect([s.queuedRequests, s.queuedItems, s.queuedBytes]).toEqual([1, 2, 200]);
    expect(s.has('a1')).toBe(false);
    // Not counted as an enqueue rejection: it was accepted, and left the queue later.
    expect(s.stats(1).rejectedRequests).toBe(0);
  });

  it('a newer frame replacing the older one is not refused for the room the older one frees', () => {
    const s = new BatchScheduler<string>({ ...base, softLimitItems: 2, hardLimitItems: 2, softLimitBytes: 100, hardLimitBytes: 100 });
    s.enqueue({ ...frame({ id: 'x', made: 0 }, 0), bytes: 40 });
    s.enqueue({ ...frame({ id: 'a1', key: 'a', made: 1 }, 0), bytes: 60 });
    // Full by items and bytes: an ordinary request is refused, a newer frame of 'a' takes a1's place.
    expect(outcome(s.enqueue({ ...frame({ id: 'y', made: 1 }, 1), bytes: 1 }))).toBe('rejected:queue-full');
    const r = s.enqueue({ ...frame({ id: 'a2', key: 'a', made: 2 }, 1), bytes: 60 });
    expect(r.kind).toBe('backpressure');
    expect(outcome(r)).toBe('ok-/a1');
    // A frame that does not fit even in a1's room is refused, and a1's successor stays.
    expect(outcome(s.enqueue({ ...frame({ id: 'a3', key: 'a', made: 3 }, 2), bytes: 61 }))).toBe('rejected:queue-full');
    expect(ids(s.drain()).sort()).toEqual(['a2', 'x']);
  });

  it('expiry takes the key with the request: an older frame is queued afterwards', () => {
    const clock = new ManualClock(0);
    const s = new BatchScheduler<string>({ ...base, maxQueueDelayMs: [0, 0] });
    s.enqueue(frame({ id: 'a5', key: 'a', made: 5, deadlineAt: 10 }, clock.nowMs));
    clock.set(50);
    const d = s.decide(clock.nowMs);
    expect(ids(d.expired)).toEqual(['a5']);
    expect(s.queuedStreams).toBe(0);
    expect(outcome(s.enqueue(frame({ id: 'a4', key: 'a', made: 4 }, clock.nowMs)))).toBe('ok');
  });

  it('collectExpired (device busy) cleans the key too', () => {
    const s = new BatchScheduler<string>(base);
    s.enqueue(frame({ id: 'a1', key: 'a', made: 1, deadlineAt: 10 }, 0));
    expect(ids(s.collectExpired(50))).toEqual(['a1']);
    expect(s.queuedStreams).toBe(0);
  });

  it('removal (cancellation) cleans the key; the next frame of the stream displaces nothing', () => {
    const s = new BatchScheduler<string>(base);
    s.enqueue(frame({ id: 'a1', key: 'a', made: 1 }, 0));
    expect(s.remove('a1')?.id).toBe('a1');
    expect(s.queuedStreams).toBe(0);
    expect(outcome(s.enqueue(frame({ id: 'a0', key: 'a', made: 0 }, 1)))).toBe('ok');
  });

  it('a request handed back by trimPadding is the queued frame of its stream again', () => {
    // The trim-accounting shape: 9 one-item requests at level 1, gears up to 16, the 9th goes back.
    const s = new BatchScheduler<string>({ priorityLevels: 3, maxQueueDelayMs: [0, 5, 20], agingMs: null, gears: [1, 2, 4, 8, 16], maxBatchSize: 16, streamSuperseded: 'drop' });
    for (let i = 0; i < 9; i++) s.enqueue(frame({ id: `s${i}-f1`, key: `s${i}`, made: 1, priority: 2 }, i === 0 ? 0 : 15));
    const d = s.decide(20);
    expect(d.kind === 'dispatch' && d.batch.members.length).toBe(8);
    expect(s.queuedStreams).toBe(1);
    expect(outcome(s.enqueue(frame({ id: 's8-f2', key: 's8', made: 2, priority: 2 }, 21)))).toBe('ok-/s8-f1');
    // A dispatched stream's next frame displaces nothing.
    expect(outcome(s.enqueue(frame({ id: 's0-f2', key: 's0', made: 2, priority: 2 }, 21)))).toBe('ok');
  });

  it('no leak: after N frames of 1000 streams, all dispatched or superseded, the map is empty', () => {
    const STREAMS = 1000;
    const FRAMES = 5;
    const clock = new ManualClock(0);
    const s = new BatchScheduler<string>({ ...base, maxQueueDelayMs: [0, 0], maxBatchSize: 32, softLimitItems: 8192, hardLimitItems: 8192 });
    let dispatched = 0;
    let superseded = 0;
    const served = new Set<string>();
    const take = (): void => {
      const d = s.decide(clock.nowMs);
      if (d.kind !== 'dispatch') return;
      dispatched += d.batch.members.length;
      for (const m of d.batch.members) served.add(m.id);
    };
    for (let f = 0; f < FRAMES; f++) {
      for (let k = 0; k < STREAMS; k++) {
        clock.advance(1);
        const r = s.enqueue(frame({ id: `s${k}-f${f}`, key: `s${k}`, made: clock.nowMs }, clock.nowMs));
        expect(r.kind).not.toBe('rejected');
        if (r.kind !== 'rejected') superseded += r.superseded?.length ?? 0;
        // The device keeps up with a third of the arrivals: the rest supersede each other.
        if (k % 96 === 0) take();
      }
      expect(s.queuedStreams).toBe(s.queuedRequests);
    }
    while (s.queuedRequests > 0) take();
    expect(s.queuedStreams).toBe(0);
    expect(superseded).toBeGreaterThan(0);
    expect(dispatched + superseded).toBe(STREAMS * FRAMES);
    // The last frame of every stream was served.
    for (let k = 0; k < STREAMS; k++) expect(served.has(`s${k}-f${FRAMES - 1}`)).toBe(true);
  });

  it('an invalid createdAt is refused rather than left unordered', () => {
    const s = new BatchScheduler<string>(base);
    expect(outcome(s.enqueue(frame({ id: 'a', key: 'a', made: Number.NaN }, 0)))).toBe('rejected:invalid');
  });
});
