import type { Entry } from './lane.ts';
import type { RequestQueue } from './request-queue.ts';
import type { SchedulerOptions } from './scheduler-options.ts';
import type { RejectReason, SchedulerRequest } from './scheduler-types.ts';
import { frameAt, validateRequest } from './validate-request.ts';

/** What enqueue may do with a request, judged before anything changes. */
export type Admission<P> =
  | { readonly kind: 'refuse'; readonly reason: RejectReason; readonly message: string }
  /** A late older frame of a stream whose newer frame is queued (streamSuperseded 'drop'). */
  | { readonly kind: 'older-frame'; readonly newer: Entry<P> }
  /** Queue it, removing `displaced` (the older queued frame of its stream) first, if any. */
  | { readonly kind: 'queue'; readonly displaced: Entry<P> | undefined };

/**
 * Validation, duplicates, the stream rule and the hard limits, in that order. The limits see the
 * queue as it will be: a newer frame replacing an older one of its stream is not refused for room
 * the older one frees. Pure: reads the queue, changes nothing.
 */
export function admission<P>(q: RequestQueue<P>, o: SchedulerOptions, req: SchedulerRequest<P>): Admission<P> {
  const invalid = validateRequest(req, o);
  if (invalid !== null) return { kind: 'refuse', reason: invalid[0], message: invalid[1] };
  if (q.has(req.id)) return { kind: 'refuse', reason: 'duplicate', message: `request ${req.id} is already queued` };
  const displaced = req.streamKey !== undefined && q.tracksStreams ? q.ofStream(req.streamKey) : undefined;
  // A late older frame (a redelivery, a slow partition): the newer one queued already wins.
  if (displaced !== undefined && frameAt(req) < frameAt(displaced.req)) return { kind: 'older-frame', newer: displaced };
  const heldItems = q.items - (displaced?.items ?? 0);
  if (heldItems + req.items > o.hardLimitItems) {
    return { kind: 'refuse', reason: 'queue-full', message: `queue holds ${heldItems} items; ${req.items} more would pass hardLimitItems ${o.hardLimitItems}` };
  }
  const bytes = req.bytes ?? 0;
  const heldBytes = q.bytes - (displaced?.bytes ?? 0);
  // An empty queue takes any one request: the wire limits bound its size, and refusing it here
  // would refuse it forever.
  if (q.size - (displaced === undefined ? 0 : 1) > 0 && heldBytes + bytes > o.hardLimitBytes) {
    return { kind: 'refuse', reason: 'queue-full', message: `queue holds ${heldBytes} bytes; ${bytes} more would pass hardLimitBytes ${o.hardLimitBytes}` };
  }
  return { kind: 'queue', displaced };
}
