/**
 * The adaptive batch-size limit (DESIGN §4). Every `windowBatches` completions it looks at the p90
 * device time of that window:
 * - above target × (1 + hysteresis): limit ← limit × (target / p90)^0.5, snapped DOWN to a gear
 *   (at least one gear lower, so a small overshoot still makes progress);
 * - below target × (1 − hysteresis), and no change for `growIntervalMs`: up one gear, but only if
 *   the learnt estimate for that gear, or the current gear's scaled up proportionally, fits the
 *   target (grows back slowly, no ping-pong).
 * The window restarts after every change so that samples from the old size do not vote again.
 *
 * A step down is taken only while it pays: a gear half the size must bring a batch's device time to
 * at most 1/√2 of the larger one's (in general est(small) / est(large) ≤ √(small / large)), i.e. cut
 * latency at least as much as it cuts the items served per device-ms. Why: on a device whose time
 * is mostly a fixed cost per batch (100 ms + 1 ms an item, target 50 ms) the limit went
 * 32 → 16 → … → 1, each step buying ~10 % of latency for half the throughput, and a backlog full
 * batches would drain was served at a twentieth of the rate, nearly all of it expired. Judged by
 * the gears' own measured device times; a gear not run yet is assumed to pay (the derived
 * estimates lean on a prior), and once run, a step that did not pay is undone and not retried
 * while the measurements say so.
 */
export interface AdaptiveLimitOptions {
  targetLatencyMs: number | null;
  windowBatches: number;
  hysteresis: number;
  growIntervalMs: number;
}

export class AdaptiveLimit {
  private index: number;
  private readonly window: number[] = [];
  private lastChangeAt = -Infinity;
  private changes = 0;
  private lastP90Ms: number | null = null;

  constructor(
    private readonly gears: readonly number[],
    private options: AdaptiveLimitOptions,
  ) {
    this.index = gears.length - 1;
  }

  get enabled(): boolean {
    return this.options.targetLatencyMs !== null;
  }

  /** Current limit on items per batch; always a gear. */
  get current(): number {
    return this.gears[this.index] as number;
  }

  get stats(): { limit: number; lastP90Ms: number | null; changes: number } {
    return { limit: this.current, lastP90Ms: this.lastP90Ms, changes: this.changes };
  }

  /**
   * Feeds one completed batch; `estimateMs(gear)` is the learnt device time, used to vet growth;
   * `measuredMs(gear)` the gear's own measured device time (undefined: not run yet), used to vet
   * shrinking.
   */
  record(deviceMs: number, nowMs: number, estimateMs: (gear: number) => number, measuredMs: (gear: number) => number | undefined = () => undefined): void {
    const target = this.options.targetLatencyMs;
    if (target === null) return;
    if (this.lastChangeAt === -Infinity) this.lastChangeAt = nowMs;
    this.window.push(deviceMs);
    if (this.window.length < this.options.windowBatches) return;
    const p90 = quantile(this.window, 0.9);
    this.lastP90Ms = p90;
    this.window.length = 0;
    const h = this.options.hysteresis;
    if (p90 > target * (1 + h)) {
      const above = this.gears[this.index + 1];
      if (above !== undefined && pays(above, this.current, measuredMs) === false) {
        this.change(this.index + 1, nowMs);
        return;
      }
      const wanted = this.current * Math.sqrt(target / p90);
      let next = this.index;
      while (next > 0 && (this.gears[next] as number) > wanted) next--;
      if (next === this.index && next > 0) next--;
      let to = this.index;
      while (to > next && pays(this.gears[to] as number, this.gears[to - 1] as number, measuredMs) !== false) to--;
      this.change(to, nowMs);
    } else if (p90 < target * (1 - h) && this.index < this.gears.length - 1 && nowMs - this.lastChangeAt >= this.options.growIntervalMs) {
      // The next gear does not run while the limit is below it, so its own estimate may date from
      // the slow spell that shrank the limit and would veto growth for good. Device time is affine
      // in the batch with a base >= 0, so the current gear's fresh estimate scaled up
      // proportionally bounds it from above.
      const next = this.gears[this.index + 1] as number;
      const bound = Math.min(estimateMs(next), (estimateMs(this.current) * next) / this.current);
      if (bound <= target) this.change(this.index + 1, nowMs);
    }
  }

  /**
   * A new target (a model config reload). The window's device times stay: they do not depend on
   * the target, and the next evaluation judges them against the new one. Off: the limit goes back
   * to the largest gear, where a scheduler without a target stays (a shrunk limit would never grow
   * back). On from off: the growth interval counts from now.
   */
  retarget(targetLatencyMs: number | null, nowMs: number): void {
    const was = this.options.targetLatencyMs;
    if (was === targetLatencyMs) return;
    this.options = { ...this.options, targetLatencyMs };
    if (targetLatencyMs === null) {
      this.window.length = 0;
      this.change(this.gears.length - 1, nowMs);
    } else if (was === null) {
      this.lastChangeAt = nowMs;
    }
  }

  private change(index: number, nowMs: number): void {
    if (index === this.index) return;
    this.index = index;
    this.lastChangeAt = nowMs;
    this.changes++;
  }
}

/**
 * Whether going from gear `large` to gear `small` cuts device time at least as much as throughput
 * (see the class comment); undefined when either has not been measured.
 */
function pays(large: number, small: number, measuredMs: (gear: number) => number | undefined): boolean | undefined {
  const largeMs = measuredMs(large);
  const smallMs = measuredMs(small);
  if (largeMs === undefined || smallMs === undefined || !(largeMs > 0)) return undefined;
  return smallMs / largeMs <= Math.sqrt(small / large);
}

/** Nearest-rank quantile; sorts a copy (the window is small). */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank] as number;
}
