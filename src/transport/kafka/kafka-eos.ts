import type { Admin, Producer } from 'kafkajs';
import { FleetError } from '../../errors/fleet-error.ts';
import { kafkaError, mayBeUnknownTopic } from './kafka-client.ts';
import { chunkByBytes, groupByTopic, type OutgoingMessage } from './kafka-outcomes.ts';
import type { PartitionTracker } from './partition-tracker.ts';

/** A settled delivery waiting to leave in a transaction together with its offset. */
export interface EosPayload {
  readonly messages: readonly OutgoingMessage[];
  /** Written, with the offsets that cover it. */
  readonly resolve: () => void;
  /** Not written: its partition was revoked before it could go (the new owner answers it). */
  readonly dropped: () => void;
  readonly reject: (error: FleetError) => void;
}

export interface TrackedPartition {
  readonly topic: string;
  readonly partition: number;
  readonly tracker: PartitionTracker<EosPayload>;
}

/**
 * The group's committed offsets (the next offset to read) of `partitions` as the broker has them
 * now, keyed `topic/partition` (-1 or missing: none).
 */
export type CommittedOffsets = (groupId: string, partitions: ReadonlyArray<{ readonly topic: string; readonly partition: number }>) => Promise<ReadonlyMap<string, number>>;

/** CommittedOffsets through `admin` (the transport's; OffsetFetch without KIP-447's requireStable). */
export function committedOffsetsVia(admin: Admin): CommittedOffsets {
  return async (groupId, partitions) => {
    const out = new Map<string, number>();
    for (const t of await admin.fetchOffsets({ groupId, topics: [...new Set(partitions.map((p) => p.topic))] })) {
      for (const p of t.partitions) out.set(`${t.topic}/${p.partition}`, Number(p.offset));
    }
    return out;
  };
}

/** The consumer's hold on its group membership (GroupLease): no transaction commits without it. */
export interface MembershipLease {
  /** Whether the group cannot have given this member's partitions away yet. */
  held(): boolean;
  /** How long a transaction waits for the lease to come back (the consumer's next heartbeat) before its settles fail, retriable. */
  readonly renewalWaitMs: number;
}

/** A partition's settled prefix going out in one transaction. */
interface PrefixOf {
  readonly tp: TrackedPartition;
  readonly count: number;
  readonly commitNext: number;
  readonly payloads: EosPayload[];
}

/**
 * Exactly-once settle: results (and DLQ records) are written in one Kafka transaction together
 * with the consumer offsets that cover them (sendOffsets), so a crash either loses both or
 * keeps both. Only the contiguous settled prefix of a partition can go: a result settled behind
 * an unsettled request waits, otherwise a crash would redeliver (and re-answer) it. One
 * transaction at a time (kafkajs producers cannot run concurrent transactions); settles that
 * arrive meanwhile ride in the next one.
 *
 * kafkajs sends TxnOffsetCommit v0-v1 (no KIP-447 group metadata): the broker takes this worker's
 * offsets for a partition that a rebalance already gave another worker, whose own offset fetch
 * then missed them, and both answer the same requests. So no transaction commits while a
 * rebalance is under way: from the moment the consumer learns of it (REBALANCING, before it
 * rejoins) until its new assignment is known, transactions wait, and one in flight is aborted
 * before its commit and goes again without the revoked partitions. A worker evicted from the group
 * without knowing it (its session ran out while its process stalled; it learns of it only at its
 * next heartbeat) would still commit, and its transactional id is its own, so the new owner's
 * producer does not fence it: a transaction commits only while the consumer's membership lease
 * holds (GroupLease: a heartbeat or join sent less than half a session ago was answered), checked
 * before it starts and again just before its commit, so the group cannot have evicted it by a
 * session running out until at least half a session after that check. When such a worker rejoins
 * (under a new member id), it keeps nothing it held, also of partitions assigned to it again: their
 * requests may have been answered meanwhile (KafkaTransport, onJoin). Left open: a commit whose
 * EndTxn completes more than that after the check (a stall of the process, or a broker that slow,
 * right between the two), one already sent as a rebalance starts, and a member removed by an admin's
 * LeaveGroup in its name (only predecessors' ids are, see removePredecessorMembers).
 *
 * A commit that got no answer (the broker died or timed out after it had the EndTxn request;
 * kafkajs sends EndTxn once) may have been committed: its results and offsets are in. Its settles
 * fail, retriable, as any failed transaction's, but its partitions are in doubt: before the next
 * transaction of such a partition, a fresh producer's InitProducerId (which the coordinator answers
 * once that transaction is complete, committed or aborted) and the group's committed offsets tell
 * which it was, and the deliveries it committed are done without being written again.
 */
export class TransactionalCommitter {
  private running: Promise<void> | undefined;
  private again = false;
  /** Revoked partitions whose settled payloads still wait: they are let go between transactions. */
  private revoked: TrackedPartition[] = [];
  private closing = false;
  /** Set from the start of a rebalance until its assignment: transactions wait for the wake. */
  private rebalancing = false;
  private wake: (() => void) | undefined;
  /** Group changes seen (starts and assignments): a transaction that saw one must not commit. */
  private groupChanges = 0;
  /** Partitions whose last commit got no answer: the offset that transaction committed, if it did. */
  private readonly doubts = new Map<PartitionTracker<EosPayload>, number>();

  constructor(
    private readonly groupId: string,
    private readonly partitions: () => Iterable<TrackedPartition>,
    private readonly producers: {
      /** Runs a transaction writing to `topics` (which then exist) with the producer for it. */
      withProducer<T>(topics: readonly string[], work: (producer: Producer) => Promise<T>): Promise<T>;
      /** The next transaction gets a fresh producer. */
      renewProducer(): void;
      /** The messages as they leave (a client's inbox found gone: their orElse, see ResultSender.routed). */
      routed(messages: readonly OutgoingMessage[]): readonly OutgoingMessage[];
    },
    /**
     * Tells a commit that got no answer from one that did not happen. Without it such a commit's
     * results are written again when their settle is retried (answered twice if it had committed).
     */
    private readonly committedOffsets?: CommittedOffsets,
    private readonly lease?: MembershipLease,
  ) {}

  kick(): void {
    if (this.running !== undefined) {
      this.again = true;
      return;
    }
    // Failures reach the waiting settles through their payloads' reject.
    this.running = this.loop()
      .catch(() => undefined)
      .finally(() => {
        this.running = undefined;
        if (this.again) {
          this.again = false;
          this.kick();
        }
      });
  }

  async idle(): Promise<void> {
    while (this.running !== undefined) await this.running;
  }

  /**
   * The partitions were revoked: their offsets are the new owner's to commit, and it answers their
   * uncommitted requests again, so this worker's results for them must not be written (that would
   * answer them twice). Their settled payloads are dropped unwritten.
   */
  revoke(parts: readonly TrackedPartition[]): void {
    if (parts.length === 0) return;
    this.revoked.push(...parts);
    this.kick();
  }

  /** The consumer learnt of a rebalance and rejoins: nothing commits until assigned(). */
  rebalanceStarted(): void {
    this.groupChanges++;
    this.rebalancing = true;
  }

  /** The new assignment is in place (after revoke() of what it took away). */
  assigned(): void {
    this.groupChanges++;
    this.rebalancing = false;
    this.wake?.();
  }

  /**
   * Closing: what can go out still goes; a settled payload stuck behind a delivery nobody settled
   * would otherwise wait forever (and close() with it), so it is rejected and left for redelivery.
   */
  async close(): Promise<void> {
    this.closing = true;
    this.wake?.();
    this.kick();
    await this.idle();
  }

  /** Until the rebalance under way ends (or close). */
  private untilAssigned(): Promise<void> {
    return new Promise<void>((resolve) => {
      this.wake = () => {
        this.wake = undefined;
        resolve();
      };
    });
  }

  private async loop(): Promise<void> {
    // After a transaction the broker refused for good (a result over its size limit): that many
    // transactions of one delivery each, until the one it refuses is found and rejected alone.
    // Otherwise everyone in it would get the refusal, and the runtime replaces refused results.
    let soloLeft = 0;
    // After a transaction failed on a topic deleted since it was last checked (a reply topic
    // deleted after use, a closed client's inbox): the same one once more, which checks its topics
    // first and creates them again (an inbox is found gone instead). Rejected instead, a payload of
    // the same partition placed after it waited behind it, and so did the settle that placed both,
    // for good.
    let unknownTopicRetried = false;
    for (;;) {
      while (this.rebalancing && !this.closing) await this.untilAssigned();
      for (const tp of this.revoked.splice(0)) {
        this.doubts.delete(tp.tracker);
        for (const p of tp.tracker.stuckPayloads()) p.dropped();
      }
      if (this.rebalancing && this.closing) {
        // Closing mid-rebalance: what is settled cannot be written safely; it is redelivered.
        this.rejectStuck();
        return;
      }
      const seen = this.groupChanges;
      const batch = this.nextBatch(soloLeft > 0);
      if (batch.length === 0) {
        if (this.closing) this.rejectStuck();
        return;
      }
      const payloads = batch.flatMap((b) => b.payloads);
      const doubtful = batch.filter((b) => this.doubts.has(b.tp.tracker));
      if (doubtful.length > 0) {
        try {
          await this.resolveDoubts(doubtful);
        } catch (err) {
          const error = kafkaError(err, 'exactly-once: finding out whether a transaction whose commit got no answer was committed failed');
          this.producers.renewProducer();
          for (const p of payloads) p.reject(error);
          for (const b of batch) for (const p of b.tp.tracker.stuckPayloads()) p.reject(error);
          throw error;
        }
        // Its committed deliveries are done: the rest of the batch goes as usual.
        continue;
      }
      if (this.lease !== undefined && !this.lease.held()) {
        // The group may have evicted this worker and given its partitions to another, which answers
        // them: nothing is written until a heartbeat says otherwise (or a rejoin revokes them).
        if (await this.untilLeaseHeld(this.lease)) continue;
        const error = new FleetError(
          'TRANSPORT_ERROR',
          `exactly-once: not published: no heartbeat of this worker's membership of group ${this.groupId} answered within half its session; its partitions may be another worker's now; settle again`,
          { retriable: true },
        );
        for (const p of payloads) p.reject(error);
        for (const b of batch) for (const p of b.tp.tracker.stuckPayloads()) p.reject(error);
        throw error;
      }
      const topics = [...new Set(payloads.flatMap((p) => this.producers.routed(p.messages).map((m) => m.topic)))];
      let committed: boolean;
      const progress = { commitSent: false };
      try {
        committed = await this.producers.withProducer(topics, (producer) => this.transaction(producer, batch, payloads, seen, progress));
      } catch (err) {
        const error = kafkaError(err, 'exactly-once transaction (results + offsets) failed');
        if (progress.commitSent && this.committedOffsets !== undefined) for (const b of batch) this.doubts.set(b.tp.tracker, b.commitNext);
        // Its sequence numbers may be out of step with the broker now (RotatingProducer.renew).
        this.producers.renewProducer();
        if (mayBeUnknownTopic(err) && !unknownTopicRetried) {
          unknownTopicRetried = true;
          continue;
        }
        unknownTopicRetried = false;
        if (!error.retriable && payloads.length > 1 && soloLeft === 0) {
          soloLeft = payloads.length;
          continue;
        }
        // Nothing of this transaction is visible: re-open the entries so they can be settled
        // again (or released), and tell their callers. Those behind them in their partitions
        // would wait for them to be settled again, maybe by the very settle call waiting for
        // them: they fail too, retriable, and go again with them (also after a passing failure:
        // a fenced producer, a broker timeout).
        for (const p of payloads) p.reject(error);
        const behind = new FleetError('TRANSPORT_ERROR', `not published: an earlier request of the partition was not (${error.message}); settle again`, { retriable: true });
        for (const b of batch) for (const p of b.tp.tracker.stuckPayloads()) p.reject(behind);
        if (soloLeft === 0) throw error;
        // Found the refused one: the others go on as usual.
        soloLeft = 0;
        continue;
      }
      unknownTopicRetried = false;
      // Aborted for a rebalance: the same deliveries go again once it is over, unless revoked.
      if (!committed) continue;
      if (soloLeft > 0) soloLeft--;
      for (const b of batch) b.tp.tracker.advance(b.count);
      for (const p of payloads) p.resolve();
    }
  }

  /** Whether the lease came back within its renewal wait. */
  private async untilLeaseHeld(lease: MembershipLease): Promise<boolean> {
    for (const until = Date.now() + lease.renewalWaitMs; !lease.held(); await new Promise((r) => setTimeout(r, 50))) {
      if (Date.now() >= until) return false;
    }
    return true;
  }

  /** Every partition's settled prefix; `solo`: only the first delivery of the first one. */
  private nextBatch(solo: boolean): PrefixOf[] {
    const batch: PrefixOf[] = [];
    for (const tp of this.partitions()) {
      const prefix = tp.tracker.prefix(solo ? 1 : Infinity);
      if (prefix === undefined) continue;
      batch.push({ tp, ...prefix });
      if (solo) break;
    }
    return batch;
  }

  private rejectStuck(): void {
    const error = new FleetError('CLOSED', 'closed before an earlier delivery of the partition settled; it will be redelivered');
    for (const tp of this.partitions()) for (const p of tp.tracker.stuckPayloads()) p.reject(error);
  }

  /**
   * Whether the transaction in doubt on each of `doubtful`'s partitions was committed; its
   * deliveries settled again since are then done, unwritten. The failed transaction renewed the
   * producer: this one's InitProducerId waits for the coordinator to complete the transaction in
   * doubt (it is in already when a transaction of another partition ran since).
   */
  private async resolveDoubts(doubtful: readonly PrefixOf[]): Promise<void> {
    const lookup = this.committedOffsets;
    if (lookup === undefined) return;
    await this.producers.withProducer([], async (producer) => {
      const txn = await producer.transaction();
      await txn.abort();
    });
    const offsets = await lookup(
      this.groupId,
      doubtful.map((b) => ({ topic: b.tp.topic, partition: b.tp.partition })),
    );
    for (const b of doubtful) {
      const { tracker } = b.tp;
      const doubtNext = this.doubts.get(tracker);
      if (doubtNext === undefined) continue;
      if ((offsets.get(`${b.tp.topic}/${b.tp.partition}`) ?? -1) < doubtNext) {
        // Not committed (aborted by the coordinator): written as usual.
        this.doubts.delete(tracker);
        continue;
      }
      const count = settledBelow(tracker, doubtNext);
      const done = count > 0 ? tracker.prefix(count) : undefined;
      if (done !== undefined) {
        tracker.advance(done.count);
        for (const p of done.payloads) p.resolve();
      }
      // Deliveries of that transaction not settled again yet find it still in doubt (and committed).
      if (tracker.uncommittedFrom >= doubtNext) this.doubts.delete(tracker);
    }
  }

  /** False when aborted because the group changed since `seen` (nothing of it is visible). */
  private async transaction(
    producer: Producer,
    batch: readonly PrefixOf[],
    payloads: readonly EosPayload[],
    seen: number,
    progress: { commitSent: boolean },
  ): Promise<boolean> {
    const txn = await producer.transaction();
    try {
      // Routed here, after withProducer checked the topics: an inbox found gone there goes elsewhere.
      for (const chunk of chunkByBytes(payloads.flatMap((p) => this.producers.routed(p.messages)))) {
        await txn.sendBatch({ topicMessages: groupByTopic(chunk) });
      }
      const byTopic = new Map<string, Array<{ partition: number; offset: string }>>();
      for (const b of batch) {
        const list = byTopic.get(b.tp.topic) ?? [];
        list.push({ partition: b.tp.partition, offset: String(b.commitNext) });
        byTopic.set(b.tp.topic, list);
      }
      await txn.sendOffsets({
        consumerGroupId: this.groupId,
        topics: [...byTopic].map(([topic, partitions]) => ({ topic, partitions })),
      });
      // Last check before the commit: the lease may have run out while the transaction was built.
      if (this.groupChanges !== seen || this.lease?.held() === false) {
        await txn.abort();
        return false;
      }
      progress.commitSent = true;
      await txn.commit();
      return true;
    } catch (err) {
      await txn.abort().catch(() => undefined);
      throw err;
    }
  }
}

/** How many entries of `tracker`'s settled prefix lie below offset `next` (offsets are not contiguous). */
function settledBelow(tracker: PartitionTracker<EosPayload>, next: number): number {
  let low = 0;
  let high = tracker.prefix()?.count ?? 0;
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if ((tracker.prefix(mid)?.commitNext ?? Infinity) <= next) low = mid;
    else high = mid - 1;
  }
  return low;
}
