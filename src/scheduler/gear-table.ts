import type { DeviceTimeEstimator } from './device-time-estimator.ts';

/**
 * Least gain (ms) worth padding a batch up for: 1 µs. The samples an estimate learns from are the
 * device's event timings (float32 ms) capped by a host-clock difference (Date.now(), whole ms),
 * and batches of one gear differ from run to run by far more than 1 µs, so a gain below 1 µs was
 * never measured: it is double rounding in the EWMA, the interpolation and `end - start` (1.8e-15
 * ms in the CI case). A real gain is far larger: no estimate is below MIN_ESTIMATE_MS (100 µs).
 */
const PAD_UP_MIN_GAIN_MS = 0.001;
/**
 * The same relative to the own gear's estimate, which takes over from 1 s up: a float32 sample
 * carries 6e-8 relative rounding, so 1e-6 is some 16 float32 steps of the sample itself.
 */
const PAD_UP_MIN_GAIN_RELATIVE = 1e-6;

/** How much faster than `ownMs` a larger gear must be estimated to pad a batch up to it. */
export function padUpToleranceMs(ownMs: number): number {
  return Math.max(PAD_UP_MIN_GAIN_MS, PAD_UP_MIN_GAIN_RELATIVE * ownMs);
}

/** Whether a larger gear estimated at `largerMs` is genuinely faster than the own gear's `ownMs`. */
function fasterBeyondTolerance(largerMs: number, ownMs: number): boolean {
  return largerMs < ownMs - padUpToleranceMs(ownMs);
}

/**
 * The gears of one scheduler and what the estimates say about them. Learnt estimates need not be
 * monotone in the gear (a 0 ms sample, a slow warm-up batch, plain noise): gear 2 may look faster
 * than gear 1. Which one is wrong cannot be told, but a batch can always be padded further up, so
 * "can a batch holding n items end by a deadline" is asked of every gear from the smallest one
 * holding n upwards (`reachMs`), and a batch that would miss in its own gear runs in the smallest
 * larger gear that would not (`runGear`). Running there also measures that gear again, so a
 * degenerate low estimate corrects itself. Judging by the own gear alone expired requests a larger
 * batch would have served, and trimPadding (which judges a returned request by the batch it would
 * join) handed back requests the next expiry sweep then expired.
 *
 * A larger gear counts only when it is estimated faster than the own gear by more than
 * padUpToleranceMs: estimates equal up to rounding (0.5000000000000018 ms against 0.5 ms, seen in
 * CI) say nothing about which gear is faster, and a batch is not padded 4x on them: it is judged
 * by its own gear alone, so a request that gear misses by a rounding error is out of reach.
 *
 * Only configured gears are padded up: without them every size up to maxBatchSize (up to 65,536)
 * is a "gear" of a model that needs no padding, and each size is judged by its own estimate.
 */
export class GearTable {
  /** gearOf[n]: the smallest gear holding n items (n <= the largest gear). */
  readonly gearOf: Int32Array;
  /**
   * reach[g], for a configured gear g: the least estimate of g and of every larger gear faster
   * than g beyond padUpToleranceMs, i.e. the estimate of the gear the batch can run in at best.
   */
  private readonly reach: Float64Array;

  constructor(
    private readonly gears: readonly number[],
    private readonly padUp: boolean,
    private readonly estimator: DeviceTimeEstimator,
  ) {
    const largest = gears[gears.length - 1] as number;
    this.gearOf = new Int32Array(largest + 1);
    let g = 0;
    for (let n = 1; n <= largest; n++) {
      while ((gears[g] as number) < n) g++;
      this.gearOf[n] = gears[g] as number;
    }
    this.reach = new Float64Array(padUp ? largest + 1 : 0);
    this.refresh();
  }

  /** Call after every change of the estimates (a recorded completion). O(gears). */
  refresh(): void {
    if (!this.padUp) return;
    // least: the least estimate of the gears above. When it is not faster beyond the tolerance, no
    // larger gear is (each is at least `least`), so g's own estimate stands.
    let least = Infinity;
    for (let i = this.gears.length - 1; i >= 0; i--) {
      const gear = this.gears[i] as number;
      const own = this.estimator.estimateMs(gear);
      this.reach[gear] = fasterBeyondTolerance(least, own) ? least : own;
      least = Math.min(least, own);
    }
  }

  /** Least estimated device time of a batch that holds what `gear` holds (padded up as needed). */
  reachMs(gear: number): number {
    return this.padUp ? (this.reach[gear] as number) : this.estimator.estimateMs(gear);
  }

  /**
   * The gear a batch of `items` runs in: its own gear when that ends by `deadline` from `startAt`
   * (or no gear faster beyond the tolerance does), else the smallest larger gear that is faster
   * beyond the tolerance and does.
   */
  runGear(items: number, startAt: number, deadline: number): number {
    const own = this.gearOf[items] as number;
    if (!this.padUp) return own;
    const ownMs = this.estimator.estimateMs(own);
    if (startAt + ownMs <= deadline || startAt + (this.reach[own] as number) > deadline) return own;
    for (const gear of this.gears) {
      if (gear <= own) continue;
      const ms = this.estimator.estimateMs(gear);
      if (fasterBeyondTolerance(ms, ownMs) && startAt + ms <= deadline) return gear;
    }
    return own;
  }
}
