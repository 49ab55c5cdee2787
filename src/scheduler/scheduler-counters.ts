import type { LevelStats, SchedulerStats } from './scheduler-types.ts';

type CounterStats = Pick<
  SchedulerStats,
  'dispatchedBatches' | 'dispatchedRequests' | 'dispatchedItems' | 'paddedItems' | 'paddingRatio' | 'recentPaddingRatio' | 'expiredRequests' | 'rejectedRequests' | 'supersededRequests'
>;

/** What one scheduler has done so far (cumulative, plus the recent padding EWMA), for its stats. */
export class SchedulerCounters {
  private batches = 0;
  private requests = 0;
  private items = 0;
  private paddedItems = 0;
  /** Device slots (gear × bound) sent, and how many of them held real data. */
  private slots = 0;
  private realSlots = 0;
  private expired = 0;
  private rejected = 0;
  private superseded = 0;
  private recentPaddingRatio = 0;
  private readonly levelExpired: number[];
  private readonly levelDispatched: number[];

  constructor(
    levels: number,
    private readonly ewmaAlpha: number,
  ) {
    this.levelExpired = new Array<number>(levels).fill(0);
    this.levelDispatched = new Array<number>(levels).fill(0);
  }

  countRejected(): void {
    this.rejected++;
  }

  countSuperseded(): void {
    this.superseded++;
  }

  countExpired(level: number): void {
    this.expired++;
    this.levelExpired[level] = (this.levelExpired[level] as number) + 1;
  }

  countBatch(members: readonly { readonly level: number }[], items: number, gear: number, slots: number, realSlots: number): void {
    this.batches++;
    this.requests += members.length;
    this.items += items;
    this.paddedItems += gear - items;
    this.slots += slots;
    this.realSlots += realSlots;
    const ratio = slots === 0 ? 0 : 1 - realSlots / slots;
    this.recentPaddingRatio = this.batches === 1 ? ratio : this.recentPaddingRatio + this.ewmaAlpha * (ratio - this.recentPaddingRatio);
    for (const { level } of members) this.levelDispatched[level] = (this.levelDispatched[level] as number) + 1;
  }

  expiredAtLevel(level: number): number {
    return this.levelExpired[level] as number;
  }

  dispatchedAtLevel(level: number): number {
    return this.levelDispatched[level] as number;
  }

  snapshot(): CounterStats {
    return {
      dispatchedBatches: this.batches,
      dispatchedRequests: this.requests,
      dispatchedItems: this.items,
      paddedItems: this.paddedItems,
      paddingRatio: this.slots === 0 ? 0 : 1 - this.realSlots / this.slots,
      recentPaddingRatio: this.recentPaddingRatio,
      expiredRequests: this.expired,
      rejectedRequests: this.rejected,
      supersededRequests: this.superseded,
    };
  }
}

/** Per priority level: what is queued (from `queue`) and what `counters` counted. */
export function levelStats(
  counters: SchedulerCounters,
  queue: { requestsAtLevel(level: number): number; itemsAtLevel(level: number): number; oldestArrivedAt(level: number): number },
  levels: number,
  nowMs: number,
): LevelStats[] {
  return Array.from({ length: levels }, (_, level) => {
    const oldest = queue.oldestArrivedAt(level);
    return {
      level,
      requests: queue.requestsAtLevel(level),
      items: queue.itemsAtLevel(level),
      oldestAgeMs: oldest === Infinity ? 0 : Math.max(0, nowMs - oldest),
      expired: counters.expiredAtLevel(level),
      dispatched: counters.dispatchedAtLevel(level),
    };
  });
}
