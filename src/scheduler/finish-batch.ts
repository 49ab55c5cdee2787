import type { DeviceTimeEstimator } from './device-time-estimator.ts';
import type { GearTable } from './gear-table.ts';
import type { Entry } from './lane.ts';
import type { SchedulerCounters } from './scheduler-counters.ts';
import type { SchedulerOptions } from './scheduler-options.ts';
import type { Batch, DispatchReason } from './scheduler-types.ts';

/** What finishing a batch reads from its scheduler (a TrimContext serves). */
export interface FinishContext {
  readonly options: SchedulerOptions;
  readonly gears: GearTable;
  readonly estimator: DeviceTimeEstimator;
}

/** The batch the composed (and trimmed) `members` make: its gear, padding and estimate; counted. */
export function finishBatch<P>(
  ctx: FinishContext,
  counters: SchedulerCounters,
  members: readonly Entry<P>[],
  items: number,
  bucket: number,
  limit: number,
  reason: DispatchReason,
  startAt: number,
): Batch<P> {
  let minDeadline = Infinity;
  for (const e of members) if (e.deadline < minDeadline) minDeadline = e.deadline;
  const gear = ctx.gears.runGear(items, startAt, minDeadline);
  const estimatedDeviceMs = ctx.estimator.estimateMs(gear);
  const buckets = ctx.options.buckets;
  const bound = buckets.length > 0 ? (buckets[bucket] as number) : null;
  let realSlots = items;
  let paddedLengthSlots = 0;
  if (bound !== null) {
    realSlots = 0;
    for (const e of members) realSlots += e.items * (e.req.length as number);
    paddedLengthSlots = items * bound - realSlots;
  }
  counters.countBatch(members, items, gear, gear * (bound ?? 1), realSlots);
  return {
    members: members.map((e) => e.req),
    items,
    gear,
    paddedItems: gear - items,
    bucket: bound === null ? null : bucket,
    boundLength: bound,
    paddedLengthSlots,
    startAt,
    estimatedDeviceMs,
    // Only the stale-estimate allowance lets a member in past the estimate.
    probe: startAt + estimatedDeviceMs > minDeadline,
    reason,
    limit,
  };
}
