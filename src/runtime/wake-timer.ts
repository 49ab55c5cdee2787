import { timerDelayMs } from './timer-delay.ts';

/**
 * The one timer a worker's scheduling loop keeps: it wakes the loop at the earliest moment the
 * scheduler asked for. Re-arming for the same moment keeps the running timer (the loop re-arms on
 * every pass). JS thread only.
 */
export class WakeTimer {
  private timer: NodeJS.Timeout | undefined;
  private at = Infinity;

  constructor(private readonly onWake: () => void) {}

  /** Wake at `atMs` (epoch ms; Infinity: no wake), `nowMs` being the reading it was decided on. */
  arm(atMs: number, nowMs: number): void {
    if (atMs === this.at) return;
    this.cancel();
    this.at = atMs;
    if (!Number.isFinite(atMs)) return;
    // Capped (a deadline 40 days out woke the loop every ms): a wake at the cap finds nothing due
    // and arms the next one.
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.at = Infinity;
      this.onWake();
    }, timerDelayMs(Math.floor(atMs - nowMs)));
  }

  /** The armed time no longer means what it did (the wall clock stepped): the next arm() re-arms. */
  invalidate(): void {
    this.at = Number.NaN;
  }

  cancel(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
