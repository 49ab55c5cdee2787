import { BatchScheduler } from '../../../src/scheduler/index.ts';
import type { Batch, SchedulerOptionsInput, SchedulerRequest } from '../../../src/scheduler/index.ts';

export interface Arrival {
  /** Gap since the previous arrival, ms. */
  gapMs: number;
  priority: number;
  items: number;
  /** Relative deadline, or null for none. */
  deadlineMs: number | null;
  length?: number;
}

export interface DispatchRecord {
  index: number;
  nowMs: number;
  batch: Batch<number>;
  /** Every gear's estimate when the batch was decided (they move at each completion). */
  estimatesMs: Map<number, number>;
}

export interface SimOutcome {
  arrivals: SchedulerRequest<number>[];
  accepted: Set<string>;
  batches: DispatchRecord[];
  /** Request id → outcome index (batches and expiries share one sequence, in decision order). */
  outcomeIndex: Map<string, number>;
  /** Every end a request came to, to prove each ends exactly once. */
  ends: Map<string, string[]>;
  dispatchedAt: Map<string, number>;
  scheduler: BatchScheduler<number>;
}

/**
 * Drives a scheduler the way the runtime will: one device slot, decide on every arrival and
 * completion and at wait deadlines; device time = baseMs + perItemMs × gear.
 */
export function simulate(options: SchedulerOptionsInput, stream: readonly Arrival[], device: { baseMs: number; perItemMs: number }): SimOutcome {
  const s = new BatchScheduler<number>(options);
  const arrivals: SchedulerRequest<number>[] = [];
  let t = 0;
  stream.forEach((a, i) => {
    t += a.gapMs;
    arrivals.push({
      id: `r${i}`,
      priority: a.priority,
      items: a.items,
      arrivedAt: t,
      deadlineAt: a.deadlineMs === null ? undefined : t + a.deadlineMs,
      length: a.length,
      payload: i,
    });
  });
  const out: SimOutcome = { arrivals, accepted: new Set(), batches: [], outcomeIndex: new Map(), ends: new Map(), dispatchedAt: new Map(), scheduler: s };
  let seq = 0;
  const end = (id: string, how: string) => {
    out.ends.set(id, [...(out.ends.get(id) ?? []), how]);
    if (!out.outcomeIndex.has(id)) out.outcomeIndex.set(id, seq);
  };
  let next = 0;
  let busyUntil = -Infinity;
  let inFlight: Batch<number> | null = null;
  let wakeAt = Infinity;
  let now = 0;
  for (let guard = 0; guard < 1_000_000; guard++) {
    const nextArrival = next < arrivals.length ? (arrivals[next] as SchedulerRequest<number>).arrivedAt : Infinity;
    const completion = inFlight === null ? Infinity : busyUntil;
    now = Math.min(nextArrival, completion, wakeAt);
    if (now === Infinity) break;
    if (inFlight !== null && busyUntil <= now) {
      s.recordCompletion(inFlight.gear, busyUntil - inFlight.startAt, now);
      inFlight = null;
    }
    while (next < arrivals.length && (arrivals[next] as SchedulerRequest<number>).arrivedAt <= now) {
      const r = arrivals[next++] as SchedulerRequest<number>;
      if (s.enqueue(r).kind !== 'rejected') out.accepted.add(r.id);
    }
    wakeAt = Infinity;
    if (inFlight === null) {
      const d = s.decide(now);
      for (const e of d.expired) end(e.id, 'expired');
      seq++;
      if (d.kind === 'dispatch') {
        out.batches.push({ index: seq, nowMs: now, batch: d.batch, estimatesMs: new Map(s.options.gears.map((g) => [g, s.estimateDeviceMs(g)])) });
        for (const m of d.batch.members) {
          end(m.id, 'batch');
          out.dispatchedAt.set(m.id, now);
        }
        seq++;
        inFlight = d.batch;
        busyUntil = now + device.baseMs + device.perItemMs * d.batch.gear;
      } else if (d.kind === 'wait') {
        wakeAt = d.untilAt;
      }
    } else {
      for (const e of s.collectExpired(now, busyUntil)) end(e.id, 'expired');
      seq++;
    }
  }
  for (const r of s.drain()) end(r.id, 'drained');
  return out;
}
