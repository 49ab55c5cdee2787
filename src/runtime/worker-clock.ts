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

/** Two monotonic readings around the wall reading further apart than this: the thread was preempted between them. */
export const CLOCK_READ_GAP_MAX_MS = 1;
/** Readings of both clocks tried per nowMs() before one with a wide bracket is judged anyway. */
const CLOCK_READ_ATTEMPTS = 3;

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
  /** Half the bracket of the last reading: how far its monotonic time may be off its wall time. */
  private lastHalfGapMs = 0;

  constructor(
    private readonly onStep: (stepMs: number) => void,
    private readonly source: ClockSource = systemClock,
  ) {}

  nowMs(): number {
    // The wall reading sits between two monotonic ones. Why: a thread preempted between its reads
    // of the two clocks (7-10 ms on a loaded 2-core host) saw a false step of -d, then +d at the
    // next reading: 39-112 warnings in a 10-minute soak, each shifting the scheduler's delays.
    // A reading whose bracket is wider than CLOCK_READ_GAP_MAX_MS is taken again (preemption is
    // rare per reading, so the next one is almost always tight); the last one is judged whatever
    // its gap, with the tolerance widened by the halves of the two brackets, so even then the
    // skew is no step while a real one (seconds) is.
    let monoBefore = 0;
    let wallMs = 0;
    let monoAfter = 0;
    for (let attempt = 0; attempt < CLOCK_READ_ATTEMPTS; attempt++) {
      monoBefore = this.source.monoMs();
      wallMs = this.source.wallMs();
      monoAfter = this.source.monoMs();
      if (monoAfter - monoBefore <= CLOCK_READ_GAP_MAX_MS) break;
    }
    const monoMs = (monoBefore + monoAfter) / 2;
    const halfGapMs = (monoAfter - monoBefore) / 2;
    if (this.lastWallMs !== undefined) {
      const stepMs = wallMs - this.lastWallMs - (monoMs - this.lastMonoMs);
      if (Math.abs(stepMs) > CLOCK_STEP_TOLERANCE_MS + halfGapMs + this.lastHalfGapMs) this.onStep(stepMs);
    }
    this.lastWallMs = wallMs;
    this.lastMonoMs = monoMs;
    this.lastHalfGapMs = halfGapMs;
    return wallMs;
  }
}
