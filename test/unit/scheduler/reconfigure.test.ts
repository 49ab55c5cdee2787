// BatchScheduler.reconfigure: live options (a model config reload) take effect on a running
// scheduler from the next decision; queued requests keep their arrival and deadline and are
// never evicted by a lowered limit.
import { describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { BatchScheduler, type Decision, type LiveSchedulerOptionsInput, type SchedulerOptionsInput, type SchedulerRequest } from '../../../src/scheduler/index.ts';
import { ManualClock, ids, req, type ReqSpec } from './scheduler-fixtures.ts';

/** What a decide came to: 'dispatch:<reason>:<ids>', 'wait:<untilAt>' or 'idle'. */
function shown(d: Decision<string>): string {
  if (d.kind === 'dispatch') return `dispatch:${d.batch.reason}:${ids(d.batch.members).join(',')}`;
  return d.kind === 'wait' ? `wait:${d.untilAt}` : 'idle';
}

type Step =
  | { at: number; enqueue: ReqSpec }
  | { at: number; reconfigure: LiveSchedulerOptionsInput }
  | { at: number; decide: string };

interface Case {
  name: string;
  options: SchedulerOptionsInput;
  steps: Step[];
}

function run(c: Case): void {
  const s = new BatchScheduler<string>(c.options);
  const clock = new ManualClock();
  for (const step of c.steps) {
    clock.set(step.at);
    if ('enqueue' in step) expect(s.enqueue(req({ at: clock.nowMs, ...step.enqueue })).kind).not.toBe('rejected');
    else if ('reconfigure' in step) s.reconfigure(step.reconfigure, clock.nowMs);
    else expect(shown(s.decide(clock.nowMs)), `decide at ${step.at}`).toBe(step.decide);
  }
}

const oneLevel: SchedulerOptionsInput = { priorityLevels: 1, maxQueueDelayMs: [100], agingMs: null, maxBatchSize: 8 };
const twoLevels: SchedulerOptionsInput = { priorityLevels: 2, maxQueueDelayMs: [null, null], agingMs: 1000, maxBatchSize: 1 };

const timing: Case[] = [
  {
    name: 'a lowered delay dispatches a waiting batch at the new time, counted from its arrival',
    options: oneLevel,
    steps: [
      { at: 0, enqueue: { id: 'a' } },
      { at: 0, decide: 'wait:100' },
      { at: 10, reconfigure: { maxQueueDelayMs: [30] } },
      { at: 10, decide: 'wait:30' },
      { at: 29, decide: 'wait:30' },
      { at: 30, decide: 'dispatch:delay:a' },
    ],
  },
  {
    name: 'a delay lowered below the time already waited dispatches at once',
    options: oneLevel,
    steps: [
      { at: 0, enqueue: { id: 'a' } },
      { at: 0, enqueue: { id: 'b' } },
      { at: 50, reconfigure: { maxQueueDelayMs: [20] } },
      { at: 50, decide: 'dispatch:delay:a,b' },
    ],
  },
  {
    name: 'a raised delay holds a waiting batch longer',
    options: { ...oneLevel, maxQueueDelayMs: [20] },
    steps: [
      { at: 0, enqueue: { id: 'a' } },
      { at: 10, reconfigure: { maxQueueDelayMs: [100] } },
      { at: 20, decide: 'wait:100' },
      { at: 100, decide: 'dispatch:delay:a' },
    ],
  },
  {
    name: 'null (never on age) leaves a request to be dispatched by its deadline only',
    options: oneLevel,
    steps: [
      { at: 0, enqueue: { id: 'a', deadlineAt: 500 } },
      { at: 10, reconfigure: { maxQueueDelayMs: [null] } },
      // The deadline is kept: the batch leaves when it must (500 − device estimate − margin).
      { at: 200, decide: 'wait:493.5' },
      { at: 493.5, decide: 'dispatch:deadline:a' },
    ],
  },
  {
    name: 'without a reconfigure, strict priority serves the newer urgent request first (control)',
    options: twoLevels,
    steps: [
      { at: 0, enqueue: { id: 'bulk', priority: 1 } },
      { at: 7, enqueue: { id: 'urgent', priority: 0 } },
      { at: 10, decide: 'dispatch:full:urgent' },
    ],
  },
  {
    name: 'a lowered agingMs makes a queued bulk request overdue: it goes first',
    options: twoLevels,
    steps: [
      { at: 0, enqueue: { id: 'bulk', priority: 1 } },
      { at: 7, enqueue: { id: 'urgent', priority: 0 } },
      // Recomputed from arrival: bulk (0, level 1) overdue at (1 + 1) × 4 = 8, urgent (7, level 0) at 11.
      { at: 10, reconfigure: { agingMs: 4 } },
      { at: 10, decide: 'dispatch:full:bulk' },
      { at: 10, decide: 'dispatch:full:urgent' },
    ],
  },
  {
    name: 'aging turned off restores strict priority for a request already overdue',
    options: { ...twoLevels, agingMs: 4 },
    steps: [
      { at: 0, enqueue: { id: 'bulk', priority: 1 } },
      { at: 7, enqueue: { id: 'urgent', priority: 0 } },
      // bulk has been overdue since 8; without aging it is plain level 1 again.
      { at: 10, reconfigure: { agingMs: null } },
      { at: 10, decide: 'dispatch:full:urgent' },
    ],
  },
];

describe('reconfigure: queue delay and aging', () => {
  it.each(timing)('$name', (c) => run(c));
});

interface LimitCase {
  name: string;
  options: SchedulerOptionsInput;
  /** Queued before the reconfigure, all accepted. */
  queued: ReqSpec[];
  change: LiveSchedulerOptionsInput;
  pausedAfter: boolean;
  /** Then offered: 'ok', 'backpressure' or the reject reason. */
  offer: ReqSpec;
  verdict: string;
}

const limits: LimitCase[] = [
  {
    name: 'hardLimitItems lowered below the queue: the queue is kept, a new request is refused',
    options: { softLimitItems: 8, hardLimitItems: 16 },
    queued: [{ id: 'a', items: 3 }, { id: 'b', items: 3 }],
    change: { softLimitItems: 2, hardLimitItems: 4 },
    pausedAfter: true,
    offer: { id: 'c', items: 1 },
    verdict: 'queue-full',
  },
  {
    name: 'hardLimitBytes lowered below the queue: kept, refused',
    options: { softLimitBytes: 1000, hardLimitBytes: 4000 },
    queued: [{ id: 'a', bytes: 600 }, { id: 'b', bytes: 600 }],
    change: { softLimitBytes: 500, hardLimitBytes: 1000 },
    pausedAfter: true,
    offer: { id: 'c', bytes: 10 },
    verdict: 'queue-full',
  },
  {
    name: 'a lowered soft limit at the queue pauses intake; the next request gets backpressure',
    options: { softLimitItems: 8, hardLimitItems: 16 },
    queued: [{ id: 'a', items: 3 }],
    change: { softLimitItems: 3 },
    pausedAfter: true,
    offer: { id: 'c', items: 1 },
    verdict: 'backpressure',
  },
  {
    name: 'raised soft limits release a paused intake at once',
    options: { softLimitItems: 4, hardLimitItems: 16 },
    queued: [{ id: 'a', items: 4 }],
    change: { softLimitItems: 10 },
    pausedAfter: false,
    offer: { id: 'c', items: 1 },
    verdict: 'accepted',
  },
  {
    name: 'a raised hard limit takes what the old one refused',
    options: { softLimitItems: 8, hardLimitItems: 8 },
    queued: [{ id: 'a', items: 8 }],
    change: { softLimitItems: 16, hardLimitItems: 32 },
    pausedAfter: false, // 8 items are at the new low watermark (16 / 2)
    offer: { id: 'c', items: 8 },
    verdict: 'backpressure',
  },
];

describe('reconfigure: queue limits', () => {
  it.each(limits)('$name', (c) => {
    const s = new BatchScheduler<string>({ maxQueueDelayMs: [null, null, null], agingMs: null, maxBatchSize: 8, ...c.options });
    for (const spec of c.queued) expect(s.enqueue(req(spec)).kind).not.toBe('rejected');
    const before = s.queuedItems;
    s.reconfigure(c.change, 5);
    expect(s.queuedItems).toBe(before);
    expect(s.intakePaused).toBe(c.pausedAfter);
    const r = s.enqueue(req(c.offer));
    expect(r.kind === 'rejected' ? r.reason : r.kind).toBe(c.verdict);
    if (r.kind === 'rejected') expect(r.error.code).toBe('QUEUE_FULL');
  });

  it('queued requests over a lowered hard limit are served, and new ones are taken once the queue is below it', () => {
    const s = new BatchScheduler<string>({ maxQueueDelayMs: [0, 0, 0], agingMs: null, maxBatchSize: 4, softLimitItems: 8, hardLimitItems: 16 });
    for (let i = 0; i < 8; i++) s.enqueue(req({ id: `q${i}` }));
    s.reconfigure({ softLimitItems: 1, hardLimitItems: 4 }, 0);
    expect(s.enqueue(req({ id: 'early' })).kind).toBe('rejected');
    const first = s.decide(0);
    expect(first.kind === 'dispatch' && ids(first.batch.members)).toEqual(['q0', 'q1', 'q2', 'q3']);
    // 4 queued: one more would pass the new hard limit of 4
    expect(s.enqueue(req({ id: 'still' })).kind).toBe('rejected');
    const second = s.decide(0);
    expect(second.kind === 'dispatch' && ids(second.batch.members)).toEqual(['q4', 'q5', 'q6', 'q7']);
    expect(s.enqueue(req({ id: 'later' })).kind).toBe('backpressure');
    expect(s.stats(0).rejectedRequests).toBe(2);
  });
});

const frame = (id: string, key: string, made: number): SchedulerRequest<string> => ({ ...req({ id }), streamKey: key, createdAt: made });
const outcome = (s: BatchScheduler<string>, r: SchedulerRequest<string>): string => {
  const v = s.enqueue(r);
  if (v.kind === 'rejected') return v.reason;
  return v.superseded === undefined ? 'ok' : `ok-/${ids(v.superseded).join(',')}`;
};

describe('reconfigure: streams.superseded', () => {
  const base: SchedulerOptionsInput = { maxQueueDelayMs: [null, null, null], agingMs: null };

  it('drop → serve forgets the per-stream map: every frame is queued and served', () => {
    const s = new BatchScheduler<string>({ ...base, streamSuperseded: 'drop' });
    expect(outcome(s, frame('a1', 'a', 1))).toBe('ok');
    expect(outcome(s, frame('a2', 'a', 2))).toBe('ok-/a1');
    expect(s.queuedStreams).toBe(1);
    expect(s.reconfigure({ streamSuperseded: 'serve' }, 0)).toEqual(['streamSuperseded']);
    expect(s.queuedStreams).toBe(0);
    expect(outcome(s, frame('a3', 'a', 3))).toBe('ok');
    // An older frame is no longer refused either.
    expect(outcome(s, frame('a0', 'a', 0))).toBe('ok');
    expect(s.drain().map((r) => r.id)).toEqual(['a2', 'a3', 'a0']);
  });

  it('serve → drop tracks frames arriving from then on: frames queued before are served', () => {
    const s = new BatchScheduler<string>({ ...base, streamSuperseded: 'serve' });
    expect(outcome(s, frame('a1', 'a', 1))).toBe('ok');
    expect(outcome(s, frame('a2', 'a', 2))).toBe('ok');
    s.reconfigure({ streamSuperseded: 'drop' }, 0);
    expect(s.queuedStreams).toBe(0);
    expect(outcome(s, frame('a3', 'a', 3))).toBe('ok');
    expect(outcome(s, frame('a4', 'a', 4))).toBe('ok-/a3');
    expect(outcome(s, frame('a0', 'a', 0))).toBe('superseded');
    expect(s.queuedStreams).toBe(1);
    expect(s.drain().map((r) => r.id)).toEqual(['a1', 'a2', 'a4']);
    expect(s.queuedStreams).toBe(0);
  });
});

describe('reconfigure: the adaptive limit', () => {
  const options: SchedulerOptionsInput = { maxBatchSize: 32, gears: [1, 2, 4, 8, 16, 32], targetLatencyMs: 10, adaptiveWindowBatches: 4 };

  it('a lowered target shrinks the limit on the next window', () => {
    const s = new BatchScheduler<string>({ ...options, targetLatencyMs: 100 });
    const clock = new ManualClock();
    for (let i = 0; i < 4; i++) s.recordCompletion(32, 40, clock.advance(1));
    expect(s.limit).toBe(32);
    s.reconfigure({ targetLatencyMs: 10 }, clock.nowMs);
    for (let i = 0; i < 4; i++) s.recordCompletion(32, 40, clock.advance(1));
    expect(s.limit).toBe(16);
  });

  it('turned off, a shrunk limit goes back to the largest gear', () => {
    const s = new BatchScheduler<string>(options);
    const clock = new ManualClock();
    for (let i = 0; i < 4; i++) s.recordCompletion(32, 40, clock.advance(1));
    expect(s.limit).toBe(16);
    s.reconfigure({ targetLatencyMs: null }, clock.nowMs);
    expect(s.limit).toBe(32);
    for (let i = 0; i < 8; i++) s.recordCompletion(32, 400, clock.advance(1));
    expect(s.limit).toBe(32);
  });
});

describe('reconfigure: what it refuses', () => {
  it.each([
    { name: 'a restart-only option', change: { priorityLevels: 2 }, message: /priorityLevels cannot change on a running scheduler/ },
    { name: 'a delay list of another length', change: { maxQueueDelayMs: [1, 2] }, message: /maxQueueDelayMs needs one entry per priority level \(3\)/ },
    { name: 'a hard limit below the soft one', change: { hardLimitItems: 10 }, message: /hardLimitItems must be >= softLimitItems/ },
  ])('$name: INVALID_CONFIG, and nothing changes', ({ change, message }) => {
    const s = new BatchScheduler<string>({ maxQueueDelayMs: [0, 5, 20], softLimitItems: 64, hardLimitItems: 128 });
    const before = s.options;
    let thrown: unknown;
    try {
      s.reconfigure(change as LiveSchedulerOptionsInput, 0);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(FleetError);
    expect((thrown as FleetError).code).toBe('INVALID_CONFIG');
    expect((thrown as FleetError).message).toMatch(message);
    expect(s.options).toBe(before);
  });

  it('reports the options whose value changed, derived ones included, and none for the same values', () => {
    const s = new BatchScheduler<string>({ maxQueueDelayMs: [0, 5, 20], softLimitItems: 64, hardLimitItems: 128 });
    expect(s.reconfigure({ maxQueueDelayMs: [0, 5, 20], hardLimitItems: 128 }, 0)).toEqual([]);
    expect(s.reconfigure({ softLimitItems: 32 }, 0)).toEqual(['softLimitItems', 'resumeBelowItems']);
    expect(s.options.resumeBelowItems).toBe(16);
    expect(s.reconfigure({ maxQueueDelayMs: [0, null, 20] }, 0)).toEqual(['maxQueueDelayMs']);
    expect(s.options.maxQueueDelayMs).toEqual([0, Infinity, 20]);
  });
});
