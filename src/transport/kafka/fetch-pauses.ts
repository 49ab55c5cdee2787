import type { Consumer } from 'kafkajs';
import type { TransportLogger } from './kafka-client.ts';
import { tpKey } from './offset-committer.ts';

/** A partition as the bound sees it: its priority and how many of its deliveries are unsettled. */
export interface BoundedPartition {
  readonly topic: string;
  readonly partition: number;
  /** undefined: one topic for all priorities (bounded like priority 0). */
  readonly priority: number | undefined;
  readonly tracker: { readonly inflight: number };
}

export interface FetchPauseLimits {
  /** Unsettled deliveries per partition of a priority > 0 topic before it pauses (resumes at half). */
  readonly lowPriorityInflight: number;
  /** The same bound for priority 0: a memory bound only. */
  readonly topPriorityInflight: number;
}

/**
 * What the consumer fetches. Three reasons to pause a request topic, kept apart so lifting one
 * never lifts another: stopped intake (drain), the runtime's backpressure (whole topics, lowest
 * priorities first), and a per-partition bound on unsettled deliveries, which keeps a deep
 * low-priority backlog at the broker so priority-0 fetches never queue behind it locally.
 */
export class FetchPauses {
  private readonly runtime = new Set<string>();
  private readonly bounded = new Map<string, Set<number>>();
  private stoppedAll = false;

  constructor(
    private readonly consumer: () => Consumer | undefined,
    private readonly isClosed: () => boolean,
    private readonly limits: FetchPauseLimits,
    private readonly logger: TransportLogger | undefined,
  ) {}

  get stopped(): boolean {
    return this.stoppedAll;
  }

  /** Intake stops for good (drain or close). */
  stop(topics: Iterable<string>): void {
    this.stoppedAll = true;
    for (const topic of topics) this.apply(topic);
  }

  pause(topics: Iterable<string>): void {
    for (const topic of topics) {
      this.runtime.add(topic);
      this.apply(topic);
    }
  }

  resume(topics: Iterable<string>): void {
    for (const topic of topics) {
      this.runtime.delete(topic);
      this.apply(topic);
    }
  }

  /** Pauses a partition whose unsettled deliveries reached its bound; resumes it at half. */
  bound(part: BoundedPartition): void {
    const limit = part.priority === undefined || part.priority === 0 ? this.limits.topPriorityInflight : this.limits.lowPriorityInflight;
    let set = this.bounded.get(part.topic);
    const inflight = part.tracker.inflight;
    if (inflight >= limit && !set?.has(part.partition)) {
      if (set === undefined) this.bounded.set(part.topic, (set = new Set()));
      set.add(part.partition);
      this.apply(part.topic);
    } else if (inflight <= limit / 2 && set?.has(part.partition)) {
      set.delete(part.partition);
      this.apply(part.topic);
    }
  }

  /** After a rebalance: bounds of partitions no longer ours go, and kafkajs gets every topic's state again. */
  reassigned(assigned: ReadonlySet<string>, topics: Iterable<string>): void {
    for (const [topic, set] of this.bounded) {
      for (const p of set) if (!assigned.has(tpKey(topic, p))) set.delete(p);
    }
    for (const topic of topics) this.apply(topic);
  }

  /** Applies the wanted pause state of a topic to kafkajs. */
  private apply(topic: string): void {
    const c = this.consumer();
    if (c === undefined || this.isClosed()) return;
    try {
      if (this.stoppedAll || this.runtime.has(topic)) {
        c.pause([{ topic }]);
        return;
      }
      c.resume([{ topic }]);
      const bounded = this.bounded.get(topic);
      if (bounded !== undefined && bounded.size > 0) c.pause([{ topic, partitions: [...bounded] }]);
    } catch (err) {
      // kafkajs refuses pause before run() has set up the group; the first join applies it again.
      this.logger?.debug({ err, topic }, 'pause/resume deferred');
    }
  }
}
