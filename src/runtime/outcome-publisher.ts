import type { Logger } from '../observability/logger.ts';
import type { Outcome, Transport } from '../transport/transport.ts';

/**
 * Collects outcomes and settles them with the transport in small batches (publish results, then
 * ack). A failed settle is retried with backoff, never dropped: the delivery stays unacked, so a
 * crash meanwhile means redelivery, not loss.
 */
export class OutcomePublisher {
  private queue: Outcome[] = [];
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private closed = false;
  private pendingCount = 0;

  constructor(
    private readonly transport: Transport,
    private readonly log: Logger,
    private readonly lingerMs: number,
    private readonly maxBatch = 500,
    private readonly onSettled: (outcomes: readonly Outcome[], settledAt: number) => void = () => {},
  ) {}

  /** Outcomes accepted but not yet acknowledged by the transport. */
  get pending(): number {
    return this.pendingCount;
  }

  push(outcome: Outcome): void {
    this.queue.push(outcome);
    this.pendingCount++;
    if (this.queue.length >= this.maxBatch) this.kick();
    else this.timer ??= setTimeout(() => this.kick(), this.lingerMs);
  }

  private kick(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.flushing || this.queue.length === 0) return;
    this.flushing = this.flushLoop().finally(() => {
      this.flushing = undefined;
      if (this.queue.length > 0) this.kick();
    });
  }

  private async flushLoop(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      let attempt = 0;
      for (;;) {
        try {
          await this.transport.settle(batch);
          this.pendingCount -= batch.length;
          this.onSettled(batch, Date.now());
          break;
        } catch (err) {
          attempt++;
          if (this.closed && attempt > 3) {
            this.log.error({ err, outcomes: batch.length }, 'settle failed during shutdown; deliveries stay unacked and will be redelivered');
            this.pendingCount -= batch.length;
            break;
          }
          const backoffMs = Math.min(5000, 50 * 2 ** Math.min(attempt, 7));
          this.log.warn({ err, attempt, backoffMs, outcomes: batch.length }, 'settle failed; retrying');
          await new Promise((r) => setTimeout(r, backoffMs));
        }
      }
    }
  }

  /** Settles everything queued; resolves when the transport has acknowledged it all. */
  async flush(): Promise<void> {
    this.kick();
    while (this.flushing) await this.flushing;
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
  }
}
