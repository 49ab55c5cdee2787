/**
 * A sweep run every `intervalMs` on an unref'd timer, never two at once (a sweep asked for while
 * one runs joins it); stop() ends the timer and waits for the sweep in progress. JS thread only.
 */
export class PeriodicSweep<T> {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<T> | undefined;

  constructor(private readonly run: () => Promise<T>) {}

  /** Starts sweeping every `intervalMs` (and once now, with `now`); 0 never sweeps. */
  start(intervalMs: number, now = false): void {
    if (intervalMs <= 0 || this.timer !== undefined) return;
    this.timer = setInterval(() => void this.sweep(), intervalMs);
    this.timer.unref();
    if (now) void this.sweep();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }

  sweep(): Promise<T> {
    this.running ??= this.run().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }
}
