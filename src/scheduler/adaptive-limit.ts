/**
 * The adaptive batch-size limit (DESIGN §4). Every `windowBatches` completions it looks at the p90
 * device time of that window:
 * - above target × (1 + hysteresis): limit ← limit × (target / p90)^0.5, snapped DOWN to a gear
 *   (at least one gear lower, so a small overshoot still makes progress);
 * - below target × (1 − hysteresis), and no change for `growIntervalMs`: up one gear, but only if
 *   the learnt estimate for that gear, or the current gear's scaled up proportionally, fits the
 *   target (grows back slowly, no ping-pong).
 * The window restarts after every change so that samples from the old size do not vote again.
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

  /** Feeds one completed batch; `estimateMs(gear)` is the learnt device time, used to vet growth. */
  record(deviceMs: number, nowMs: number, estimateMs: (gear: number) => number): void {
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
      const wanted = this.current * Math.sqrt(target / p90);
      let next = this.index;
      while (next > 0 && (this.gears[next] as number) > wanted) next--;
      if (next === this.index && next > 0) next--;
      this.change(next, nowMs);
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

/** Nearest-rank quantile; sorts a copy (the window is small). */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank] as number;
}
