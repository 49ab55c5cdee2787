import type { FleetError } from '../errors/fleet-error.ts';

/**
 * What the scheduler needs to know about one request. The payload is opaque: the scheduler never
 * looks inside it, it only hands it back in a batch or an expiry.
 */
export interface SchedulerRequest<P = unknown> {
  /** Unique while queued (a duplicate is rejected, which is how a redelivery shows up). */
  readonly id: string;
  /** 0 is the most urgent; must be < priorityLevels. */
  readonly priority: number;
  /** Samples along the leading batch dimension (shape[0]); never split across batches. */
  readonly items: number;
  /** When the request reached this worker (epoch ms); queue delay and aging count from it. */
  readonly arrivedAt: number;
  /** Absolute deadline (epoch ms); after it the result is worthless. */
  readonly deadlineAt?: number | undefined;
  /** Length of the variable axis, for bucketing; required when buckets are configured. */
  readonly length?: number | undefined;
  /** Host memory the request holds while queued (its message bytes), for the byte limits; default 0. */
  readonly bytes?: number | undefined;
  /**
   * Runs in a batch of its own: it was on a device that hung, so it must not take other requests
   * down with it again, and a second hang pins the blame on it alone.
   */
  readonly alone?: boolean | undefined;
  /**
   * The stream (e.g. a camera) this request is a frame of. With `streamSuperseded: 'drop'` at most
   * one request per key is queued: the newer frame displaces the older (see EnqueueResult).
   */
  readonly streamKey?: string | undefined;
  /** When the producer made it (epoch ms): which of two frames of a stream is newer. Default: arrivedAt. */
  readonly createdAt?: number | undefined;
  readonly payload: P;
}

/**
 * `superseded` (only with `streamSuperseded: 'drop'`, absent when empty): queued requests this one
 * displaced, as an older frame of its streamKey. They left the queue and never reach a device; the
 * runtime answers them `rejected` (see supersededError).
 */
export type EnqueueResult<P = unknown> =
  | { readonly kind: 'accepted'; readonly superseded?: readonly SchedulerRequest<P>[] }
  /** Accepted, and the soft limit is reached: the runtime should pause intake until `intakePaused` is false. */
  | { readonly kind: 'backpressure'; readonly superseded?: readonly SchedulerRequest<P>[] }
  | { readonly kind: 'rejected'; readonly reason: RejectReason; readonly error: FleetError };

/** 'superseded': an older frame than the one of its streamKey already queued (a late redelivery). */
export type RejectReason = 'queue-full' | 'too-large' | 'too-long' | 'invalid' | 'duplicate' | 'superseded';

/** Why a batch left now. */
export type DispatchReason = 'full' | 'delay' | 'deadline';

export interface Batch<P = unknown> {
  /** In composition order: overdue (aged) first, then priority, earliest deadline, arrival. */
  readonly members: readonly SchedulerRequest<P>[];
  /** Real samples, Σ members' items. */
  readonly items: number;
  /** The batch size the device runs: the smallest gear >= items. */
  readonly gear: number;
  /** gear − items: zero rows added to reach the gear. */
  readonly paddedItems: number;
  /** Index into `buckets`, or null when the model is not bucketed. */
  readonly bucket: number | null;
  /** Every member's variable axis is padded to this; null when not bucketed. */
  readonly boundLength: number | null;
  /** Padding along the variable axis, in sample-positions: Σ items × (boundLength − length). */
  readonly paddedLengthSlots: number;
  /** When the batch is expected to start on the device: max(now, deviceFreeAt). */
  readonly startAt: number;
  /**
   * Learnt device time of `gear` at dispatch. Every member's deadline >= startAt + this, unless
   * `probe`: then only > startAt (the estimate was stale, see SchedulerOptions.estimateTrustMs).
   */
  readonly estimatedDeviceMs: number;
  /** Sent against a stale estimate to measure it again; its members may be late. */
  readonly probe: boolean;
  readonly reason: DispatchReason;
  /** The adaptive limit when it was formed (a single request larger than it may still go alone). */
  readonly limit: number;
}

/**
 * The result of `decide(now)`. `expired` holds requests that can no longer meet their deadline;
 * the runtime publishes `expired` results for them without device time.
 */
export type Decision<P = unknown> =
  | { readonly kind: 'dispatch'; readonly batch: Batch<P>; readonly expired: readonly SchedulerRequest<P>[] }
  /** Nothing to send yet; call decide again at `untilAt` (or on the next enqueue / completion). */
  | { readonly kind: 'wait'; readonly untilAt: number; readonly expired: readonly SchedulerRequest<P>[] }
  /** Nothing will become ready by time alone: queue empty, or only untimed requests short of a full batch. */
  | { readonly kind: 'idle'; readonly expired: readonly SchedulerRequest<P>[] };

export interface LevelStats {
  readonly level: number;
  readonly requests: number;
  readonly items: number;
  /** Age of the oldest queued request of this level, 0 when empty. */
  readonly oldestAgeMs: number;
  readonly expired: number;
  readonly dispatched: number;
}

/**
 * What queued work costs on the device when batches are full: under a backlog every batch holds
 * `gear` items (the adaptive limit, a gear), so that gear's learnt estimate over its size is the
 * device time one item takes.
 */
export interface FullBatchCost {
  /** The full batch: the adaptive limit (the largest gear unless targetLatencyMs lowered it). */
  readonly gear: number;
  /** Learnt device time of `gear` (host/device copies included, as recorded) ÷ gear. */
  readonly deviceMsPerItem: number;
  /** Mean items (samples) per dispatched request, 1 before any dispatch. */
  readonly itemsPerRequest: number;
}

export interface SchedulerStats {
  readonly queuedRequests: number;
  readonly queuedItems: number;
  readonly queuedBytes: number;
  readonly intakePaused: boolean;
  readonly levels: readonly LevelStats[];
  readonly dispatchedBatches: number;
  readonly dispatchedRequests: number;
  readonly dispatchedItems: number;
  /** Gear padding rows, cumulative. */
  readonly paddedItems: number;
  /** Share of device slots (gear × bound) that were padding (gear rows and variable axis), cumulative. */
  readonly paddingRatio: number;
  /** Same, as an EWMA over recent batches. */
  readonly recentPaddingRatio: number;
  readonly expiredRequests: number;
  /** Refused by enqueue, cumulative (a frame superseded on arrival included). */
  readonly rejectedRequests: number;
  /** Frames answered superseded, cumulative: displaced from the queue plus refused on arrival. */
  readonly supersededRequests: number;
  readonly adaptiveLimit: number;
  readonly adaptiveLastP90Ms: number | null;
  readonly adaptiveChanges: number;
  readonly deviceEstimates: readonly { gear: number; estimateMs: number; samples: number }[];
}
