import type { DeviceLike } from './load-checked.ts';
import { monoNowMs } from './worker-clock.ts';

/**
 * What a worker's start-up is waiting for, and whether it ran past worker.startTimeoutMs. A device
 * open or a model read that never returns (a hung driver, a stalled mount) leaves a worker
 * starting for good: the bound lets it say what hung, exit for a restart and fail /healthz.
 */
export class StartWatch {
  private readonly startedMs = monoNowMs();
  private step = 'starting';
  private finished = false;
  private readonly loads = new Map<number, { readonly path: string; readonly sinceMs: number }>();
  private nextLoad = 0;

  constructor(readonly timeoutMs: number) {}

  /** The step now under way, named as what it waits for ("opening device 0"). */
  enter(step: string): void {
    this.step = step;
  }

  finish(): void {
    this.finished = true;
  }

  elapsedMs(): number {
    return Math.round(monoNowMs() - this.startedMs);
  }

  overdue(): boolean {
    return !this.finished && this.elapsedMs() >= this.timeoutMs;
  }

  /** Model loads still in flight name the files; past them the step is what is left (the broker). */
  waitingFor(): string {
    if (this.loads.size > 0) {
      const now = monoNowMs();
      return `loading ${[...this.loads.values()].map((l) => `${l.path} (for ${Math.round(now - l.sinceMs)} ms)`).join(', ')}`;
    }
    return this.step;
  }

  /** For /healthz before the worker exists: unhealthy once the bound passed. */
  health(): { healthy: true } | { healthy: false; reason: string } {
    if (!this.overdue()) return { healthy: true };
    return { healthy: false, reason: `start-up not finished after ${this.elapsedMs()} ms (worker.startTimeoutMs ${this.timeoutMs}): waiting for ${this.waitingFor()}` };
  }

  /** The device with its model loads tracked while the start is under way. */
  watchDevice(device: DeviceLike): DeviceLike {
    return {
      id: device.id,
      loadModel: async (path, opts) => {
        if (this.finished) return await device.loadModel(path, opts);
        const id = this.nextLoad++;
        this.loads.set(id, { path, sinceMs: monoNowMs() });
        try {
          return await device.loadModel(path, opts);
        } finally {
          this.loads.delete(id);
        }
      },
      memInfo: () => device.memInfo(),
      close: () => device.close(),
    };
  }
}
