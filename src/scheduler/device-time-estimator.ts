/**
 * Learnt device time per gear: an EWMA of completed batches' device time, one per gear.
 * Before a gear has data its estimate is the prior (base + perItem × gear), rescaled by the
 * nearest observed gear so one observation already corrects the whole curve's level.
 */
/** Most a single sample may exceed the current estimate by (see record). */
const OUTLIER_FACTOR = 4;
/**
 * Least an estimate may be. No batch takes 0 ms: a 0 ms estimate (a 0 ms sample, a 0 ms prior, a
 * line extended below 0) would let a batch carry a request due at the very moment it starts, since
 * "ends by its deadline" would then hold with deadline = start. With this floor every deadline
 * test means the deadline is strictly after the start.
 */
const MIN_ESTIMATE_MS = 0.1;

export class DeviceTimeEstimator {
  private readonly ewmaMs = new Map<number, number>();
  private readonly samples = new Map<number, number>();
  /** When each gear's own estimate last took a sample (the caller's clock). */
  private readonly sampledAt = new Map<number, number>();
  /** Observed gears, ascending, for nearest-neighbour rescaling. */
  private observed: number[] = [];
  private readonly cache = new Map<number, number>();

  constructor(
    private readonly alpha: number,
    private readonly priorBaseMs: number,
    private readonly priorPerItemMs: number,
  ) {}

  /**
   * `restartAfterMs`: a gear whose last sample is at least this old (at `atMs`) restarts its EWMA at
   * this sample. Its estimate is stale (see SchedulerOptions.estimateTrustMs), and such a sample is
   * mostly a probe sent to measure it again: blended in at alpha, one 800 ms warm-up sample took
   * ten probes (50 s of expired traffic) to fall under a 100 ms deadline.
   */
  record(gear: number, deviceMs: number, atMs?: number, restartAfterMs = Infinity): void {
    if (!(deviceMs >= 0) || !Number.isFinite(deviceMs)) return;
    const lastAt = this.sampledAt.get(gear);
    const restart = atMs !== undefined && lastAt !== undefined && atMs - lastAt >= restartAfterMs;
    if (atMs !== undefined) this.sampledAt.set(gear, atMs);
    // Requests a gear's estimate says cannot make their deadline are expired, so that gear stops
    // running and its estimate is never corrected: one stalled batch would lock it out for good.
    // Once there is data, a sample counts for at most OUTLIER_FACTOR × the estimate (never below
    // the prior, so 0 ms samples cannot pin it at 0); a real slowdown still gets through in a few
    // batches. The very first sample replaces the prior as before.
    const sample = this.observed.length === 0 ? deviceMs : Math.min(deviceMs, OUTLIER_FACTOR * Math.max(this.estimateMs(gear), this.prior(gear)));
    const prev = restart ? undefined : this.ewmaMs.get(gear);
    this.ewmaMs.set(gear, prev === undefined ? sample : prev + this.alpha * (sample - prev));
    this.samples.set(gear, (this.samples.get(gear) ?? 0) + 1);
    if (!this.observed.includes(gear)) this.observed = [...this.ewmaMs.keys()].sort((a, b) => a - b);
    this.cache.clear();
  }

  /** Every sampled gear's estimate is stale from now on (its last sample taken at -Infinity). */
  markStale(): void {
    for (const gear of this.sampledAt.keys()) this.sampledAt.set(gear, -Infinity);
  }

  /** Estimated device time of a batch padded to `gear`. */
  estimateMs(gear: number): number {
    const cached = this.cache.get(gear);
    if (cached !== undefined) return cached;
    const value = Math.max(MIN_ESTIMATE_MS, this.compute(gear));
    this.cache.set(gear, value);
    return value;
  }

  /** Whether any batch was recorded (else every estimate is the prior). */
  get hasData(): boolean {
    return this.observed.length > 0;
  }

  /** When `gear` last had a batch of its own recorded (undefined: never; its estimate is derived). */
  lastSampleAt(gear: number): number | undefined {
    return this.sampledAt.get(gear);
  }

  /** Per-gear EWMA and sample counts, for export. */
  snapshot(): { gear: number; estimateMs: number; samples: number }[] {
    return this.observed.map((gear) => ({
      gear,
      estimateMs: this.ewmaMs.get(gear) as number,
      samples: this.samples.get(gear) ?? 0,
    }));
  }

  private prior(gear: number): number {
    return this.priorBaseMs + this.priorPerItemMs * gear;
  }

  private compute(gear: number): number {
    const own = this.ewmaMs.get(gear);
    if (own !== undefined) return own;
    if (this.observed.length === 0) return this.prior(gear);
    let lo: number | undefined;
    let hi: number | undefined;
    for (const g of this.observed) {
      if (g < gear) lo = g;
      else if (hi === undefined) hi = g;
    }
    // Between two observed gears: interpolate linearly (device time is close to affine in batch).
    if (lo !== undefined && hi !== undefined) {
      const a = this.ewmaMs.get(lo) as number;
      const b = this.ewmaMs.get(hi) as number;
      return a + ((b - a) * (gear - lo)) / (hi - lo);
    }
    // Outside the observed range with two points on one side: extend that line (slope >= 0).
    if (this.observed.length >= 2) {
      const n = this.observed.length;
      const [x0, x1] = lo !== undefined ? [this.observed[n - 2], this.observed[n - 1]] : [this.observed[0], this.observed[1]];
      const y0 = this.ewmaMs.get(x0 as number) as number;
      const y1 = this.ewmaMs.get(x1 as number) as number;
      const slope = Math.max(0, (y1 - y0) / ((x1 as number) - (x0 as number)));
      return lo !== undefined ? y1 + slope * (gear - (x1 as number)) : Math.max(0, y0 + slope * (gear - (x0 as number)));
    }
    const near = (lo ?? hi) as number;
    const priorNear = this.prior(near);
    const scale = priorNear > 0 ? (this.ewmaMs.get(near) as number) / priorNear : 1;
    const scaled = this.prior(gear) * scale;
    // Never estimate a larger gear faster than a smaller observed one (or vice versa).
    return lo !== undefined ? Math.max(scaled, this.ewmaMs.get(lo) as number) : Math.min(scaled, this.ewmaMs.get(near) as number);
  }
}
