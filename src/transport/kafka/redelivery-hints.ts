import type { Admin } from 'kafkajs';
import { withTimeout } from '../with-timeout.ts';
import type { TransportLogger } from './kafka-client.ts';
import { decodeCommitMetadata, tpKey, type OffsetCommitter } from './offset-committer.ts';

const HINTS_TIMEOUT_MS = 5_000;

export interface RedeliveryHintsOptions {
  readonly admin: () => Admin | undefined;
  readonly groupId: string;
  readonly requestTopics: () => string[];
  /** Whether this worker held the partition before this assignment (its own state stands). */
  readonly holds: (key: string) => boolean;
  readonly offsets: OffsetCommitter;
  readonly logger?: TransportLogger | undefined;
}

/**
 * Every commit carries metadata (encodeCommitMetadata): the highest offset delivered so far, so a
 * worker that takes over a partition after a crash marks the messages the dead one had received
 * as redelivered, and the offsets that were on a device when it hung, with their counts.
 * Best effort: messages received after the dead worker's last commit look new.
 */
export class RedeliveryHints {
  /** Per partition: highest offset a previous owner had received (from commit metadata). */
  private readonly highest = new Map<string, number>();
  private loading: Promise<void> | undefined;

  constructor(private readonly o: RedeliveryHintsOptions) {}

  /** On every assignment. */
  load(assigned: ReadonlySet<string>): void {
    this.loading = this.loadHints(assigned);
  }

  /** The load in flight since the last assignment, if any: every batch waits for it. */
  get loaded(): Promise<void> | undefined {
    return this.loading;
  }

  /** The highest offset a previous owner of the partition had received (-1: none known). */
  highestDelivered(key: string): number {
    return this.highest.get(key) ?? -1;
  }

  private async loadHints(assigned: ReadonlySet<string>): Promise<void> {
    const admin = this.o.admin();
    if (admin === undefined) return;
    try {
      // Best effort, and every batch waits for it: bounded, so an admin connection left broken by
      // a broker outage cannot hold the consumer (and its rejoin) behind a hung request.
      const committed = await withTimeout(
        admin.fetchOffsets({ groupId: this.o.groupId, topics: this.o.requestTopics() }),
        HINTS_TIMEOUT_MS,
        'reading commit metadata',
      );
      for (const t of committed) {
        for (const p of t.partitions) {
          const key = tpKey(t.topic, p.partition);
          if (!assigned.has(key) || this.o.holds(key)) continue;
          const { highest, suspects } = decodeCommitMetadata(p.metadata);
          if (highest !== undefined) this.highest.set(key, highest);
          this.o.offsets.adoptSuspects(key, suspects);
        }
      }
    } catch (err) {
      this.o.logger?.warn({ err }, 'could not read commit metadata; redelivered flags stay false');
    }
  }
}
