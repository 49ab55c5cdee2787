import type { TransportLogger } from '../kafka/kafka-client.ts';
import { PeriodicSweep } from './periodic-sweep.ts';

export interface SweepTarget {
  readonly queue: string;
  /** Waiting jobs older than this are removed; 0 keeps them. */
  readonly ttlMs: number;
}

/** Removes up to `limit` waiting jobs of `queue` older than `graceMs`; resolves to how many. */
export type CleanWaiting = (queue: string, graceMs: number, limit: number) => Promise<number>;

const CLEAN_CHUNK = 1_000;

/**
 * Why: a Kafka topic keeps results for its retention time, but a BullMQ queue keeps a waiting job
 * until someone takes it. Results published to the default `{model}.replies` that nobody reads
 * (fire-and-forget producers), and DLQ records nobody inspects, would grow Redis until it runs out
 * of memory. So the workers remove those older than their TTL, as Kafka's retention would. Every
 * worker sweeps; removing is idempotent. JS thread; one sweep at a time.
 */
export class QueueSweeper {
  private readonly periodic = new PeriodicSweep(() => this.sweepAll());

  constructor(
    private readonly targets: readonly SweepTarget[],
    private readonly clean: CleanWaiting,
    private readonly logger?: TransportLogger,
    /** Swept after the targets in each round (ReplyQueues: the other queues answered on). */
    private readonly also?: (intervalMs: number) => Promise<unknown>,
  ) {}

  /** Sweeps every half TTL (the shortest), at most once a minute. */
  get intervalMs(): number {
    const ttls = this.targets.map((t) => t.ttlMs).filter((t) => t > 0);
    return ttls.length === 0 ? 0 : Math.max(100, Math.min(60_000, Math.floor(Math.min(...ttls) / 2)));
  }

  start(): void {
    this.periodic.start(this.intervalMs);
  }

  stop(): Promise<void> {
    return this.periodic.stop();
  }

  sweep(): Promise<void> {
    return this.periodic.sweep();
  }

  private async sweepAll(): Promise<void> {
    for (const { queue, ttlMs } of this.targets) {
      if (ttlMs <= 0) continue;
      let removed = 0;
      try {
        for (;;) {
          const n = await this.clean(queue, ttlMs, CLEAN_CHUNK);
          removed += n;
          if (n < CLEAN_CHUNK) break;
        }
      } catch (err) {
        this.logger?.warn({ err, queue }, 'removing expired waiting jobs failed; tried again at the next sweep');
      }
      if (removed > 0) this.logger?.info({ queue, removed, ttlMs }, 'removed waiting jobs older than their TTL (nobody took them)');
    }
    await this.also?.(this.intervalMs);
  }
}
