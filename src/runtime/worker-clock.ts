/** Where a WorkerClock reads the time: the wall clock (epoch ms) and a monotonic one. */
export interface ClockSource {
  readonly wallMs: () => number;
  readonly monoMs: () => number;
}

/** Read at call time, so a test's faked Date and performance apply. */
export const systemClock: ClockSource = { wallMs: () => Date.now(), monoMs: () => performance.now() };

/**
 * The monotonic clock (ms, arbitrary origin) the worker measures its own durations on (a request's
 * wait for its batch, in the queue): a wall-clock step between two readings moves Date.now() and
 * would count in them. Never compared with epoch times.
 */
export const monoNowMs = (): number => systemClock.monoMs();

/**
 * A wall-clock jump this large between two readings, beyond the time the monotonic clock says
 * passed, is a step (NTP, a VM resume) and not the ms rounding of Date.now() between them.
 */
export const CLOCK_STEP_TOLERANCE_MS = 5;

/**
 * The wall clock the worker schedules by (deadlines are epoch ms from producers' clocks), watched
 * against the monotonic clock: a step is reported, before the reading that saw it is returned, so
 * the scheduler keeps counting queued requests' delays in the time that really passed (see
 * BatchScheduler.clockStepped). Every reading that ends up in scheduler or device-timeline state
 * must come from here: one taken straight from Date.now() after a step and before its report would
 * be shifted once too often.
 */
export class WorkerClock {
  private lastWallMs: number | undefined;
  private lastMonoMs = 0;

  constructor(
    private readonly onStep: (stepMs: number) => void,
    private readonly source: ClockSource = systemClock,
  ) {}

  nowMs(): number {
    const wallMs = this.source.wallMs();
    const monoMs = this.source.monoMs();
    if (this.lastWallMs !== undefined) {
      const stepMs = wallMs - this.lastWallMs - (monoMs - this.lastMonoMs);
      if (Math.abs(stepMs) > CLOCK_STEP_TOLERANCE_MS) this.onStep(stepMs);
    }
    this.lastWallMs = wallMs;
    this.lastMonoMs = monoMs;
    return wallMs;
  }
}
