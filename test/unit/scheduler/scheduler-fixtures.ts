import { padUpToleranceMs } from '../../../src/scheduler/gear-table.ts';
import type { BatchScheduler, SchedulerRequest } from '../../../src/scheduler/index.ts';

export interface ReqSpec {
  id: string;
  priority?: number;
  items?: number;
  at?: number;
  deadlineAt?: number;
  length?: number;
  bytes?: number;
  alone?: boolean;
}

/** A request whose payload is its own id, so tests can see what came back. */
export function req(spec: ReqSpec): SchedulerRequest<string> {
  return {
    id: spec.id,
    priority: spec.priority ?? 0,
    items: spec.items ?? 1,
    arrivedAt: spec.at ?? 0,
    deadlineAt: spec.deadlineAt,
    length: spec.length,
    bytes: spec.bytes,
    alone: spec.alone,
    payload: spec.id,
  };
}

/** A manual clock: tests move time explicitly and pass `now` into the scheduler. */
export class ManualClock {
  constructor(public nowMs = 0) {}
  advance(ms: number): number {
    this.nowMs += ms;
    return this.nowMs;
  }
  set(at: number): number {
    this.nowMs = at;
    return at;
  }
}

export const ids = (xs: readonly { id: string }[]): string[] => xs.map((x) => x.id);

/**
 * The oracle for "can a batch holding `items` end in time": the least estimate over the request's
 * own gear and, with configured gears, every larger one estimated faster than the own gear beyond
 * padUpToleranceMs (a batch may be padded up to such a gear).
 */
export function reachMs<P>(s: BatchScheduler<P>, items: number): number {
  const own = s.gearFor(items) as number;
  const ownMs = s.estimateDeviceMs(own);
  const larger = s.options.gearsConfigured ? s.options.gears.filter((g) => g > own).map((g) => s.estimateDeviceMs(g)) : [];
  return Math.min(ownMs, ...larger.filter((ms) => ms < ownMs - padUpToleranceMs(ownMs)));
}
