import type { DeviceTimeEstimator } from './device-time-estimator.ts';

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
 * Only configured gears are padded up: without them every size up to maxBatchSize (up to 65,536)
 * is a "gear" of a model that needs no padding, and each size is judged by its own estimate.
 */
export class GearTable {
  /** gearOf[n]: the smallest gear holding n items (n <= the largest gear). */
  readonly gearOf: Int32Array;
  /** reach[g], for a configured gear g: the least estimate of g and every larger gear. */
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
    let least = Infinity;
    for (let i = this.gears.length - 1; i >= 0; i--) {
      const gear = this.gears[i] as number;
      least = Math.min(least, this.estimator.estimateMs(gear));
      this.reach[gear] = least;
    }
  }

  /** Least estimated device time of a batch that holds what `gear` holds (padded up as needed). */
  reachMs(gear: number): number {
    return this.padUp ? (this.reach[gear] as number) : this.estimator.estimateMs(gear);
  }

  /**
   * The gear a batch of `items` runs in: its own gear when that ends by `deadline` from `startAt`
   * (or no gear does), else the smallest larger gear that does.
   */
  runGear(items: number, startAt: number, deadline: number): number {
    const own = this.gearOf[items] as number;
    if (!this.padUp || startAt + this.estimator.estimateMs(own) <= deadline || startAt + (this.reach[own] as number) > deadline) return own;
    for (const gear of this.gears) if (gear > own && startAt + this.estimator.estimateMs(gear) <= deadline) return gear;
    return own;
  }
}
