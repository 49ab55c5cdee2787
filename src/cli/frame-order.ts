import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';

/**
 * The ok results of a frames run that a consumer showing each camera's results as they arrive
 * would show out of order: a frame older (by createdAt) than one of its camera answered ok before
 * it, a jump back in time on screen. The outcome counts cannot tell: on BullMQ with several
 * workers a camera's frames are served by all of them, and such a run reads like a clean one.
 * Memory: one number per camera.
 */
export class FrameOrder {
  private readonly newestOk = new Map<string, number>();
  private interval = 0;
  private total = 0;

  result(result: ResultEnvelope, request: RequestEnvelope): void {
    if (result.status !== 'ok' || request.streamKey === undefined) return;
    const newest = this.newestOk.get(request.streamKey);
    if (newest !== undefined && request.createdAt < newest) {
      this.interval++;
      this.total++;
      return;
    }
    this.newestOk.set(request.streamKey, request.createdAt);
  }

  /** The progress line's part for the interval just ended (nothing when none), then a new interval. */
  line(): string {
    const n = this.interval;
    this.interval = 0;
    return n > 0 ? ` | out of order ${n}` : '';
  }

  /** The summary's part, also when 0: that is the news a frames drill is run for. */
  summary(): string {
    return ` | out of order ${this.total}`;
  }
}
