import type { DeviceTimeEstimator } from './device-time-estimator.ts';
import type { SchedulerOptions } from './scheduler-options.ts';

/**
 * The deadline test every expiry and every batch goes through: does a batch of `gear` started at
 * `startAt` end by `deadline`? By the estimate, or, during a decide that may probe (see
 * SchedulerOptions.estimateTrustMs), because the deadline is still ahead and the gear's estimate
 * is stale. An estimate that rules its gear out is never corrected otherwise: the traffic it rules
 * out is expired without device time, so that gear never runs again.
 */
export class StaleEstimateProbe {
  /** During a decide that may send a batch against a stale estimate: its clock. */
  private probeAt: number | undefined;
  private lastProbeAt = -Infinity;
  /** The clock of the first decide: when the prior started ruling. */
  private firstDecideAt: number | undefined;

  constructor(
    private readonly estimator: DeviceTimeEstimator,
    private readonly o: Pick<SchedulerOptions, 'estimateTrustMs' | 'probeIntervalMs'>,
  ) {}

  /**
   * Opens a decide. It may probe only on an idle device, where a batch late for its deadline
   * delays nothing else, and once per probeIntervalMs.
   */
  open(nowMs: number, deviceFreeAt: number): void {
    this.firstDecideAt ??= nowMs;
    this.probeAt = deviceFreeAt <= nowMs && nowMs - this.lastProbeAt >= this.o.probeIntervalMs ? nowMs : undefined;
  }

  /** Closes the decide; a probe it dispatched starts the next interval. */
  close(nowMs: number, probed: boolean): void {
    if (probed) this.lastProbeAt = nowMs;
    this.probeAt = undefined;
  }

  /**
   * No side effect: a batch is a probe when it is sent past its own estimate, not when some
   * request was merely spared by this test.
   */
  fits(startAt: number, gear: number, deadline: number): boolean {
    if (startAt + this.estimator.estimateMs(gear) <= deadline) return true;
    if (this.probeAt === undefined || deadline <= startAt) return false;
    // Before any batch completed the prior is trusted as a sample taken at the first decide: a
    // prior that rules out all of a model's traffic (a fast model, tight deadlines) would otherwise
    // never be measured, and the model would answer nothing but `expired` for good.
    const sampledAt = this.estimator.hasData ? this.estimator.lastSampleAt(gear) : this.firstDecideAt;
    return sampledAt === undefined || this.probeAt - sampledAt >= this.o.estimateTrustMs;
  }
}
