import { FleetError } from '../errors/fleet-error.ts';

/**
 * Book-keeping every transport needs around the Transport contract: which deliveries are open,
 * which are being settled right now (so a second concurrent settle is caught), and the settle
 * calls in flight (close() waits for them). A failed settle re-opens its deliveries so the caller
 * may retry or release them.
 */
export class DeliveryLedger<E> {
  private readonly open = new Map<string, E>();
  private readonly settling = new Set<string>();
  private readonly inflight = new Set<Promise<unknown>>();
  /** Finished by a settle call that then failed as a whole: a retry of that call skips them. */
  private readonly tolerated = new Set<string>();

  get size(): number {
    return this.open.size;
  }

  add(deliveryId: string, entry: E): void {
    this.open.set(deliveryId, entry);
  }

  has(deliveryId: string): boolean {
    return this.open.has(deliveryId);
  }

  get(deliveryId: string): E | undefined {
    return this.open.get(deliveryId);
  }

  /**
   * Claims deliveries for a settle/release. Unknown, already-settled or concurrently-settling ids
   * are returned in `rejected` (the caller reports them after handling the rest).
   */
  claim<T extends { deliveryId: string }>(items: readonly T[]): { claimed: Array<{ item: T; entry: E }>; rejected: string[] } {
    const claimed: Array<{ item: T; entry: E }> = [];
    const rejected: string[] = [];
    for (const item of items) {
      const entry = this.open.get(item.deliveryId);
      if (entry === undefined && this.tolerated.delete(item.deliveryId)) continue;
      if (entry === undefined || this.settling.has(item.deliveryId)) {
        rejected.push(item.deliveryId);
        continue;
      }
      this.settling.add(item.deliveryId);
      claimed.push({ item, entry });
    }
    return { claimed, rejected };
  }

  /** The claim succeeded: the delivery is done. */
  finish(deliveryId: string): void {
    this.settling.delete(deliveryId);
    this.open.delete(deliveryId);
  }

  /** The claim failed: the delivery stays open (settle may be retried, or release called). */
  unclaim(deliveryId: string): void {
    this.settling.delete(deliveryId);
  }

  /** Drops a delivery without acking (partition revoked, consumer crashed). */
  forget(deliveryId: string): void {
    this.settling.delete(deliveryId);
    this.open.delete(deliveryId);
  }

  /** Open deliveries nobody is settling right now. */
  idleEntries(): Array<[string, E]> {
    return [...this.open.entries()].filter(([id]) => !this.settling.has(id));
  }

  entries(): Array<[string, E]> {
    return [...this.open.entries()];
  }

  track<T>(promise: Promise<T>): Promise<T> {
    this.inflight.add(promise);
    const done = (): void => {
      this.inflight.delete(promise);
    };
    promise.then(done, done);
    return promise;
  }

  /**
   * Runs one settle call. When it fails after finishing part of its deliveries (e.g. results
   * published but the commit failed), those are remembered so that retrying the same call, as
   * the runtime does, completes the rest instead of being refused as a double settle.
   */
  guard<T>(deliveryIds: readonly string[], work: () => Promise<T>): Promise<T> {
    const wasOpen = deliveryIds.filter((id) => this.open.has(id) && !this.settling.has(id));
    return this.track(
      work().catch((err: unknown) => {
        for (const id of wasOpen) if (!this.open.has(id)) this.tolerated.add(id);
        // Bounded: only the most recent failures can still be retried.
        for (const id of this.tolerated) {
          if (this.tolerated.size <= 100_000) break;
          this.tolerated.delete(id);
        }
        throw err;
      }),
    );
  }

  /** Resolves when every tracked settle/release has finished (successfully or not). */
  async quiesce(): Promise<void> {
    while (this.inflight.size > 0) await Promise.allSettled([...this.inflight]);
  }
}

export function notOpenError(rejected: readonly string[]): FleetError {
  const shown = rejected.slice(0, 5).join(', ');
  return new FleetError(
    'INVALID_ARGUMENT',
    `${rejected.length} deliveries are not open (settled or released already, being settled concurrently, or not from this transport): ${shown}${rejected.length > 5 ? ', ...' : ''}`,
    { details: { deliveryIds: rejected.slice(0, 20) } },
  );
}

export function closedError(kind: string): FleetError {
  return new FleetError('CLOSED', `${kind} transport is closed`);
}
