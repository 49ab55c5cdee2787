import { FleetError } from '../errors/fleet-error.ts';
import type { SchedulerRequest } from './scheduler-types.ts';
import { frameAt } from './validate-request.ts';

/**
 * How long a stream's served frame refuses older frames, on the scheduler's step-free clock. Late
 * frames come a few frame intervals late (a slow publish, a retried packet, a lagging decoder
 * thread), well within it. Bounded because createdAt is the producer's clock: a camera that moved
 * to a host whose clock is behind would otherwise have every frame refused until its clock passed
 * the last one served; this way it loses at most this long.
 */
export const SERVED_FRAME_MEMORY_MS = 2_000;
/** Streams remembered at most (the least recently served go first): memory stays bounded at any camera count. */
export const SERVED_STREAMS_MAX = 16_384;

interface ServedFrame {
  readonly id: string;
  readonly frameAt: number;
  /** When it left the queue for the device (step-free clock). */
  readonly servedAt: number;
}

/**
 * The newest frame of each stream that left the queue for the device (streamSuperseded 'drop'),
 * so that an older frame of that stream arriving afterwards is refused as superseded instead of
 * served after the newer one: its result would reach a consumer after the newer frame's, a jump
 * back in time on a screen, and cost the device a frame nobody wants. The queue's one-per-stream
 * map covers frames still waiting; this covers the ones gone. Pure: time comes in as arguments.
 */
export class ServedFrames {
  /** Insertion order is the order of the last dispatch, so the oldest entries are at the front. */
  private readonly byStream = new Map<string, ServedFrame>();

  get size(): number {
    return this.byStream.size;
  }

  /** The members of a dispatched batch; `servedAt` on the step-free clock. */
  dispatched(members: readonly SchedulerRequest<unknown>[], servedAt: number): void {
    for (const req of members) {
      if (req.streamKey === undefined) continue;
      const at = frameAt(req);
      const known = this.byStream.get(req.streamKey);
      // A frame handed back and dispatched again, or one let in past the memory: keep the newest.
      if (known !== undefined && known.frameAt > at && servedAt - known.servedAt <= SERVED_FRAME_MEMORY_MS) continue;
      this.byStream.delete(req.streamKey);
      this.byStream.set(req.streamKey, { id: req.id, frameAt: at, servedAt });
    }
    this.prune(servedAt);
  }

  /** The refusal of `req` when a newer frame of its stream was served within the memory; else null. */
  refusal(req: SchedulerRequest<unknown>, arrivedAt: number): FleetError | null {
    if (req.streamKey === undefined) return null;
    const served = this.byStream.get(req.streamKey);
    if (served === undefined) return null;
    if (arrivedAt - served.servedAt > SERVED_FRAME_MEMORY_MS) {
      this.byStream.delete(req.streamKey);
      return null;
    }
    // A tie is the later arrival's, as in the queue: it is the newer frame.
    if (frameAt(req) >= served.frameAt) return null;
    return new FleetError(
      'SUPERSEDED',
      `superseded by request ${served.id} of stream "${req.streamKey}" (createdAt ${served.frameAt} > ${frameAt(req)}), which went to the device first: ` +
        'a frame older than one its stream has had served is not served (model streams.superseded: drop)',
      { details: { requestId: req.id, reason: 'superseded', supersededBy: served.id, streamKey: req.streamKey } },
    );
  }

  private prune(nowMs: number): void {
    for (const [key, served] of this.byStream) {
      if (this.byStream.size <= SERVED_STREAMS_MAX && nowMs - served.servedAt <= SERVED_FRAME_MEMORY_MS) break;
      this.byStream.delete(key);
    }
  }
}
