import { FleetError } from '../errors/fleet-error.ts';
import type { Logger } from '../observability/logger.ts';
import type { Outcome, Transport } from '../transport/transport.ts';

/** Replacement outcomes: if even these fail for good, they are retried like any other, not replaced again. */
const undeliverable = new WeakSet<Outcome>();

/** One of the `maxConcurrent` settle slots, held by a settle until it ends or only waits for a creation. */
interface Slot {
  held: boolean;
  /** Given up while waiting for a creation (counted in `aside`). */
  aside: boolean;
}

/**
 * Settles that gave their slot up, at most this many per slot: past it, one waiting for a creation
 * keeps its slot as before, unless it also waits for other settles (then holding it could hang them
 * all). A worker answering a stream for a new topic starts a settle every linger while the topic is
 * created, and they all end together after it (a revert of an unbounded take on this, 99da2ce, saw
 * the Kafka priority drill's p0 p99 rise from 1.5x to 2.25x of idle).
 */
const ASIDE_PER_SLOT = 4;

/**
 * Collects outcomes and settles them with the transport in small batches (publish results, then
 * ack). Up to `maxConcurrent` settles run at once: one broker round trip per batch would otherwise
 * cap throughput at batch size / round trip. A failed settle is retried with backoff, never
 * dropped: its deliveries stay unacked, so a crash meanwhile means redelivery, not loss. A result
 * the broker refuses for good is replaced by a failed result (see settleApart). A settle left
 * waiting only for a reply destination to be created (SettleOptions.onWaitingForCreation) gives its
 * slot up (up to ASIDE_PER_SLOT per slot): with a few new Kafka reply topics at once every slot
 * waited ~100-300 ms, and the results for topics that exist, with the offset commits behind them,
 * waited too. One that also waits for other settles (Kafka exactly-once, every settle) gives it up
 * past that bound.
 */
export class OutcomePublisher {
  private queue: Outcome[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** Slots held. */
  private running = 0;
  /** Settles in flight, also those that gave their slot up: flush() waits for them all. */
  private active = 0;
  /** Settles in flight that gave their slot up. */
  private aside = 0;
  private closed = false;
  private pendingCount = 0;
  private idleWaiters: Array<() => void> = [];

  constructor(
    private readonly transport: Pick<Transport, 'settle'>,
    private readonly log: Logger,
    private readonly lingerMs: number,
    private readonly maxBatch = 500,
    private readonly onSettled: (outcomes: readonly Outcome[], settledAt: number) => void = () => {},
    private readonly maxConcurrent = 4,
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
    while (this.queue.length > 0 && this.running < this.maxConcurrent) {
      const batch = this.queue.splice(0, this.maxBatch);
      const slot: Slot = { held: true, aside: false };
      this.running++;
      this.active++;
      void this.settle(batch, slot).finally(() => {
        this.active--;
        if (slot.aside) this.aside--;
        this.free(slot);
        if (this.active === 0 && this.queue.length === 0) {
          const waiters = this.idleWaiters;
          this.idleWaiters = [];
          for (const w of waiters) w();
        }
      });
    }
  }

  /** `slot` goes back (once): the next queued batch may start. */
  private free(slot: Slot): void {
    if (!slot.held) return;
    slot.held = false;
    this.running--;
    if (this.queue.length > 0) this.kick();
  }

  /** `slot`'s settle only waits for a creation: its slot goes back, unless too many wait so already. */
  private setAside(slot: Slot, waitsForOthers: boolean): void {
    if (!slot.held || (!waitsForOthers && this.aside >= ASIDE_PER_SLOT * this.maxConcurrent)) return;
    slot.aside = true;
    this.aside++;
    this.free(slot);
  }

  private async settle(batch: Outcome[], slot: Slot): Promise<void> {
    // A retry after the slot was given up runs without one: it waits for the same creation.
    const options = { onWaitingForCreation: (waitsForOthers: boolean) => this.setAside(slot, waitsForOthers) };
    for (let attempt = 1; ; attempt++) {
      try {
        await this.transport.settle(batch, options);
        this.pendingCount -= batch.length;
        this.onSettled(batch, Date.now());
        return;
      } catch (err) {
        const failure = FleetError.from(err, 'TRANSPORT_ERROR');
        // Only a publish the broker refused for good; not CLOSED or deliveries that are not open.
        if (failure.code === 'TRANSPORT_ERROR' && !failure.retriable && !batch.some((o) => undeliverable.has(o))) {
          await this.settleApart(batch, failure, slot);
          return;
        }
        if (this.settledOtherwise(batch, failure)) return;
        if (this.closed && attempt > 3) {
          this.log.error({ err, outcomes: batch.length }, 'settle failed during shutdown; deliveries stay unacked and will be redelivered');
          this.pendingCount -= batch.length;
          return;
        }
        const backoffMs = Math.min(5000, 50 * 2 ** Math.min(attempt, 7));
        this.log.warn({ err, attempt, backoffMs, outcomes: batch.length }, 'settle failed; retrying');
        await new Promise((r) => setTimeout(r, backoffMs));
      }
    }
  }

  /**
   * Failures no retry can change, where nothing is lost by giving up: the transport is closed (its
   * session ended, so the broker redelivers what it held), or some deliveries are not open any
   * more (settled or released already; on Kafka, of a partition revoked meanwhile) while the
   * transport settled the rest of the batch. Retried, either would hold its slot and the drain
   * until the drain timeout.
   */
  private settledOtherwise(batch: readonly Outcome[], failure: FleetError): boolean {
    if (failure.code === 'CLOSED') {
      this.pendingCount -= batch.length;
      this.log.warn({ outcomes: batch.length }, 'transport closed before these results were published; the broker redelivers their requests');
      return true;
    }
    const notOpen: unknown = failure.code === 'INVALID_ARGUMENT' ? failure.details['deliveryIds'] : undefined;
    if (!Array.isArray(notOpen)) return false;
    this.pendingCount -= batch.length;
    const skipped = new Set<unknown>(notOpen);
    this.log.warn({ err: failure, outcomes: batch.length }, 'some deliveries were no longer open; the rest of the batch was settled');
    this.onSettled(
      batch.filter((o) => !skipped.has(o.delivery.deliveryId)),
      Date.now(),
    );
    return true;
  }

  /**
   * A failure that retrying cannot cure (a result over the broker's message size limit, a reply
   * topic the worker may not write) must not hold back the outcomes settled with it, nor its own
   * delivery forever (a Kafka partition commits only its contiguous settled prefix). Alone, each
   * outcome is retried; one that still fails is answered with a small `failed` result naming the
   * reason, and its request goes to the DLQ.
   */
  private async settleApart(batch: Outcome[], failure: FleetError, slot: Slot): Promise<void> {
    if (batch.length > 1) {
      for (const outcome of batch) await this.settle([outcome], slot);
      return;
    }
    const [outcome] = batch as [Outcome];
    const tooLarge = failure.details['limit'] === 'message-size';
    const error = {
      code: tooLarge ? ('LIMIT_EXCEEDED' as const) : failure.code,
      message: tooLarge
        ? `the result is over the broker's message size limit and was not delivered; shrink the request (fewer samples) or raise the broker/topic max.message.bytes (${failure.message})`
        : `the result could not be published and was replaced by this error (${failure.message})`,
    };
    const { outputs: _dropped, ...rest } = outcome.result;
    const replacement: Outcome = {
      ...outcome,
      // A small result fits where the big one did not; any other refusal may be the reply
      // destination itself (e.g. not authorized), so the model's default replies take it.
      replyTo: tooLarge ? outcome.replyTo : undefined,
      result: { ...rest, status: 'failed', error },
      dlq: outcome.dlq ?? { reason: error.code, message: error.message },
    };
    undeliverable.add(replacement);
    this.log.error({ err: failure, model: outcome.result.model, status: outcome.result.status }, 'result undeliverable; sending a failed result and a DLQ record instead');
    await this.settle([replacement], slot);
  }

  /** Settles everything queued; resolves when the transport has acknowledged it all. */
  async flush(): Promise<void> {
    this.kick();
    while (this.active > 0 || this.queue.length > 0) {
      await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
      this.kick();
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
  }
}
