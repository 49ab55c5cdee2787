import { FleetError } from '../errors/fleet-error.ts';
import { resolveSchedulerOptions } from './scheduler-options.ts';
import type { SchedulerOptions, SchedulerOptionsInput } from './scheduler-options.ts';

/**
 * The options a running scheduler can take on (BatchScheduler.reconfigure): each is read when a
 * decision is made, never baked into the structure of the queue.
 * - maxQueueDelayMs: the trigger reads it per lane at every decide from the oldest request's
 *   arrivedAt, so a queued request's due time moves with it (a lowered delay dispatches a waiting
 *   batch at the new time).
 * - agingMs: each queued request's agedAt is recomputed from its arrivedAt and level (a pass over
 *   the queue; no heap is ordered by it).
 * - the queue limits: the hard limits are checked at enqueue only, so lowering one below what is
 *   queued evicts nothing (those requests are served) and refuses new ones until the queue is back
 *   below it; the intake pause is judged again at once against the new soft limits and watermarks.
 * - targetLatencyMs: the adaptive limit's target (see AdaptiveLimit.retarget).
 * - streamSuperseded: drop → serve forgets the per-stream map (every frame queued from then on is
 *   served, and so are the ones queued); serve → drop tracks frames arriving from then on only,
 *   so frames queued before are served even when a newer one of their stream arrives.
 * Restart-only, refused here: priorityLevels (a lane, a topic or queue and a pause set per level),
 * gears and maxBatchSize (the gear table, the estimates per gear, the device's compiled gears and
 * buffers), buckets (a lane per bucket, the device's buffer sizes), and the estimator's and the
 * probe's settings, which the model config does not carry.
 */
export const LIVE_SCHEDULER_OPTIONS = [
  'maxQueueDelayMs',
  'agingMs',
  'softLimitItems',
  'hardLimitItems',
  'resumeBelowItems',
  'softLimitBytes',
  'hardLimitBytes',
  'targetLatencyMs',
  'streamSuperseded',
] as const satisfies readonly (keyof SchedulerOptionsInput & keyof SchedulerOptions)[];

export type LiveSchedulerOption = (typeof LIVE_SCHEDULER_OPTIONS)[number];
/** New values of live options; one left out keeps its value, one set to undefined goes back to its default. */
export type LiveSchedulerOptionsInput = Pick<SchedulerOptionsInput, LiveSchedulerOption>;

const LIVE: ReadonlySet<string> = new Set(LIVE_SCHEDULER_OPTIONS);

export interface Reconfigured {
  /** The input the scheduler now stands on (its original input with `change` laid over it). */
  readonly input: SchedulerOptionsInput;
  readonly options: SchedulerOptions;
  /** Resolved options whose value differs (a derived one, e.g. resumeBelowItems, included). */
  readonly changed: readonly LiveSchedulerOption[];
}

/**
 * Resolves `change` over the scheduler's input as the constructor would, so derived values
 * (resumeBelowItems at half a soft limit not set) follow and every cross-option rule holds.
 * Throws FleetError INVALID_CONFIG for a restart-only option or an invalid result; pure.
 */
export function reconfiguredOptions(input: SchedulerOptionsInput, current: SchedulerOptions, change: LiveSchedulerOptionsInput): Reconfigured {
  const refused = Object.keys(change).filter((k) => !LIVE.has(k));
  if (refused.length > 0) {
    throw new FleetError('INVALID_CONFIG', `scheduler options ${refused.join(', ')} cannot change on a running scheduler (live: ${LIVE_SCHEDULER_OPTIONS.join(', ')})`, {
      details: { options: refused },
    });
  }
  const merged: SchedulerOptionsInput = { ...input, ...change };
  const options = resolveSchedulerOptions(merged);
  const changed = LIVE_SCHEDULER_OPTIONS.filter((k) => !sameValue(options[k], current[k]));
  return { input: merged, options, changed };
}

function sameValue(a: unknown, b: unknown): boolean {
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => Object.is(x, b[i]));
  return Object.is(a, b);
}
