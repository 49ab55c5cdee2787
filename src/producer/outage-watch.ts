import type { Redis } from 'ioredis';
import type { FleetError } from '../errors/fleet-error.ts';

interface Waiter {
  timer: NodeJS.Timeout | undefined;
  readonly fail: (err: FleetError) => void;
}

/**
 * Fails each piece of work waiting on one connection once that connection has been down for
 * timeoutMs while it waited. One 'close'/'ready' listener pair serves every waiter, attached while
 * any waits: a pair per waiter made a long outage under load (every publish waiting for Redis) a
 * listener list growing by the send rate (MaxListenersExceededWarning, and each reconnect attempt
 * calling every one of them). Each waiter keeps its own timer, so one that starts late in an
 * outage still gets its full timeoutMs.
 */
export class OutageWatch {
  private readonly waiters = new Set<Waiter>();
  private readonly down = (): void => {
    for (const w of this.waiters) this.arm(w);
  };
  private readonly up = (): void => {
    for (const w of this.waiters) {
      clearTimeout(w.timer);
      w.timer = undefined;
    }
  };

  constructor(
    private readonly connection: Redis,
    private readonly timeoutMs: number,
    private readonly failure: () => FleetError,
  ) {}

  async race<T>(work: Promise<T>): Promise<T> {
    let fail: (err: FleetError) => void = () => undefined;
    const gone = new Promise<never>((_, reject) => (fail = reject));
    const waiter: Waiter = { timer: undefined, fail };
    if (this.waiters.size === 0) {
      this.connection.on('close', this.down);
      this.connection.on('ready', this.up);
    }
    this.waiters.add(waiter);
    if (this.connection.status !== 'ready') this.arm(waiter);
    try {
      return await Promise.race([work, gone]);
    } finally {
      clearTimeout(waiter.timer);
      this.waiters.delete(waiter);
      if (this.waiters.size === 0) {
        this.connection.off('close', this.down);
        this.connection.off('ready', this.up);
      }
    }
  }

  private arm(w: Waiter): void {
    w.timer ??= setTimeout(() => w.fail(this.failure()), this.timeoutMs);
  }
}
