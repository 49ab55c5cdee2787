import { FleetError } from '../errors/fleet-error.ts';
import type { SchedulerOptions } from './scheduler-options.ts';
import type { EnqueueResult, RejectReason, SchedulerRequest } from './scheduler-types.ts';

/** Why `req` can never be queued under `o` (null: it can); queue limits are checked by the caller. */
export function validateRequest(req: SchedulerRequest<unknown>, o: SchedulerOptions): [RejectReason, string] | null {
  if (!Number.isInteger(req.priority) || req.priority < 0 || req.priority >= o.priorityLevels) {
    return ['invalid', `priority ${req.priority} is outside 0..${o.priorityLevels - 1}`];
  }
  if (!Number.isInteger(req.items) || req.items < 1) return ['invalid', `items must be a positive integer, got ${req.items}`];
  if (!Number.isFinite(req.arrivedAt)) return ['invalid', 'arrivedAt must be a finite epoch ms'];
  if (req.deadlineAt !== undefined && Number.isNaN(req.deadlineAt)) return ['invalid', 'deadlineAt is NaN'];
  if (req.bytes !== undefined && !(Number.isFinite(req.bytes) && req.bytes >= 0)) return ['invalid', `bytes must be a finite number >= 0, got ${req.bytes}`];
  // NaN would make every comparison of two frames false: neither could ever supersede the other.
  if (req.createdAt !== undefined && !Number.isFinite(req.createdAt)) return ['invalid', 'createdAt must be a finite epoch ms'];
  if (req.items > o.maxBatchSize) {
    return ['too-large', `request has ${req.items} samples; the largest batch is ${o.maxBatchSize} and a request is never split`];
  }
  if (o.buckets.length > 0) {
    const length = req.length;
    if (length === undefined || !Number.isInteger(length) || length < 0) {
      return ['invalid', 'length (of the variable axis) is required for a bucketed model'];
    }
    const biggest = o.buckets[o.buckets.length - 1] as number;
    if (length > biggest) return ['too-long', `length ${length} exceeds the biggest bucket ${biggest}`];
  }
  return null;
}

/** The `rejected` answer to `req`, with the FleetError code its reason maps to. */
export function rejection(reason: RejectReason, message: string, req: SchedulerRequest<unknown>): Extract<EnqueueResult, { kind: 'rejected' }> {
  const code = reason === 'queue-full' ? 'QUEUE_FULL' : reason === 'too-large' || reason === 'too-long' ? 'LIMIT_EXCEEDED' : 'INVALID_ARGUMENT';
  return { kind: 'rejected', reason, error: new FleetError(code, message, { details: { requestId: req.id, reason } }) };
}

/** When a frame was made, for the supersede order: the producer's createdAt, else its arrival. */
export const frameAt = (req: SchedulerRequest<unknown>): number => req.createdAt ?? req.arrivedAt;

/**
 * The answer to `older`, an earlier frame of `newer`'s stream that will not be served (displaced
 * from the queue, or refused on arrival). Not retriable: a retry is just as old.
 */
export function supersededError(older: SchedulerRequest<unknown>, newer: SchedulerRequest<unknown>): FleetError {
  const stream = newer.streamKey ?? '';
  return new FleetError(
    'SUPERSEDED',
    `superseded by request ${newer.id} of stream "${stream}" (createdAt ${frameAt(newer)} >= ${frameAt(older)}): only the latest queued frame of a stream is served (model streams.superseded: drop)`,
    { details: { requestId: older.id, reason: 'superseded', supersededBy: newer.id, streamKey: stream } },
  );
}
