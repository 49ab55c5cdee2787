/**
 * When one device frees up, from the estimated device time of the batches in flight, which it runs
 * one after another in dispatch order. The runtime passes the result to `decide` as `deviceFreeAt`.
 *
 * A batch still running past its estimated end (a slow device, an overrun, a completion not yet
 * seen) is not done: its end is projected from `now`, never left in the past, or the device would
 * look free while its slots are busy and every deadline check would count from `now`. The
 * projection grows with the overrun (a device that has run late this long is likely to run late a
 * while longer) but by at most the batch's own estimate: a completion the event loop has not yet
 * delivered must not make the scheduler expire more than one batch's worth of deadlines.
 * Pure: the caller passes the time; O(batches in flight).
 */
export class DeviceTimeline {
  /** Estimated device ms of the batches in flight, in dispatch order; [0] is on the device. */
  private readonly estimatesMs: number[] = [];
  /** When the batch on the device is estimated to end. */
  private headEndAt = 0;

  /** A batch was sent to the device at `nowMs`: it starts now on an idle device, else behind the others. */
  dispatched(estimatedDeviceMs: number, nowMs: number): void {
    if (this.estimatesMs.length === 0) this.headEndAt = nowMs + estimatedDeviceMs;
    this.estimatesMs.push(estimatedDeviceMs);
  }

  /** The batch on the device left it at `nowMs`: the next one in flight starts then. */
  left(nowMs: number): void {
    this.estimatesMs.shift();
    const next = this.estimatesMs[0];
    if (next !== undefined) this.headEndAt = nowMs + next;
  }

  /** The caller's clock jumped by `stepMs` without that much time passing: the batch on the device did not move. */
  clockStepped(stepMs: number): void {
    this.headEndAt += stepMs;
  }

  /** Whether the batch on the device has run to its estimated end without leaving it. */
  overrunning(nowMs: number): boolean {
    return this.estimatesMs.length > 0 && nowMs >= this.headEndAt;
  }

  /**
   * When the device is expected to be free: `nowMs` when nothing is in flight, else at least
   * `floorMs` after `nowMs` (the caller's lead, so a batch formed `floorMs` early still overlaps).
   */
  freeAt(nowMs: number, floorMs: number): number {
    const headMs = this.estimatesMs[0];
    if (headMs === undefined) return nowMs;
    const overrunMs = nowMs - this.headEndAt;
    let endAt = Math.max(this.headEndAt, nowMs + Math.max(floorMs, Math.min(overrunMs, headMs)));
    for (let i = 1; i < this.estimatesMs.length; i++) endAt += this.estimatesMs[i] as number;
    return endAt;
  }
}
