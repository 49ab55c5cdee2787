import type { DeviceTimeEstimator } from './device-time-estimator.ts';
import type { GearTable } from './gear-table.ts';
import type { Entry } from './lane.ts';
import type { RequestQueue } from './request-queue.ts';
import type { SchedulerOptions } from './scheduler-options.ts';

/** What trimming reads from its scheduler, and the queue it hands members back to. */
export interface TrimContext<P> {
  readonly options: SchedulerOptions;
  readonly gears: GearTable;
  readonly estimator: DeviceTimeEstimator;
  readonly queue: RequestQueue<P>;
  /** Latest start that keeps `entry` within its deadline in the batch its bucket would form. */
  releaseAt(entry: Entry<P>, limit: number): number;
}

/**
 * Hands the batch's tail back when a smaller gear runs the remaining members at a lower device
 * cost per item, and every returned member can still afford to wait. Returns the items kept;
 * the returned members leave `members` and go back to the queue.
 */
export function trimPadding<P>(ctx: TrimContext<P>, members: Entry<P>[], items: number, limit: number, nowMs: number, startAt: number): number {
  const { options, gears } = ctx;
  const gearOf = gears.gearOf;
  const gear = gearOf[items] as number;
  if (!options.trimPadding || !options.gearsConfigured || gear === items || members.length < 2) return items;
  // A batch padded up past its own gear to meet a deadline is not trimmed (see GearTable).
  if (runGear(gears, members, members.length, items, startAt) !== gear) return items;
  let keep = members.length;
  let kept = items;
  while (keep > 1 && (gearOf[kept] as number) >= gear) kept -= (members[--keep] as Entry<P>).items;
  const smaller = gearOf[kept] as number;
  if (smaller >= gear) return items;
  const est = (g: number) => ctx.estimator.estimateMs(g);
  if (est(smaller) / kept >= est(gear) / items) return items;
  if (runGear(gears, members, keep, kept, startAt) !== smaller) return items;
  const delays = options.maxQueueDelayMs;
  // A returned member starts no earlier than the end of the trimmed batch, not at its start.
  const nextStartAt = startAt + est(smaller);
  for (let i = keep; i < members.length; i++) {
    const e = members[i] as Entry<P>;
    const canWait = e.arrivedAt + (delays[e.level] as number) > nowMs && e.agedAt > nowMs && ctx.releaseAt(e, limit) > nextStartAt;
    if (!canWait) return items;
  }
  for (const e of members.splice(keep)) ctx.queue.add(e);
  return kept;
}

/** The gear the first `count` members (`items` in all) run in, from `startAt`. */
function runGear<P>(gears: GearTable, members: readonly Entry<P>[], count: number, items: number, startAt: number): number {
  let minDeadline = Infinity;
  for (let i = 0; i < count; i++) minDeadline = Math.min(minDeadline, (members[i] as Entry<P>).deadline);
  return gears.runGear(items, startAt, minDeadline);
}
