import { FleetError } from '../../errors/fleet-error.ts';
import { notOpenError, type DeliveryLedger } from '../delivery-ledger.ts';
import type { Outcome, SettleOptions } from '../transport.ts';
import { placeForTransaction } from './eos-placement.ts';
import { kafkaError } from './kafka-client.ts';
import type { EosPayload, TrackedPartition, TransactionalCommitter } from './kafka-eos.ts';
import { messagesFor, type KafkaSource, type Names, type OutgoingMessage } from './kafka-outcomes.ts';
import type { OffsetCommitter } from './offset-committer.ts';
import type { PartitionTracker } from './partition-tracker.ts';
import type { ResultSender } from './result-sender.ts';

/** An open delivery as the transport holds it until settled. */
export interface HeldDelivery {
  readonly source: KafkaSource;
  /** The partition it came from, of the latest assignment that delivered it (see KafkaTransport.onBatch). */
  tracker: PartitionTracker<EosPayload>;
  part: HeldPartition;
}

/** A partition of the transport's current assignment. */
export interface HeldPartition extends TrackedPartition {
  readonly priority: number | undefined;
}

/** A claimed delivery of an at-least-once settle with the records its outcome produces. */
interface PublishClaim {
  readonly item: { readonly deliveryId: string };
  readonly entry: HeldDelivery;
  readonly messages: OutgoingMessage[];
}

/** The broker refused a record as over its message size limit (see kafkaError). */
const isMessageSizeRefusal = (err: unknown): boolean => err instanceof FleetError && err.details['limit'] === 'message-size';

export interface OutcomeSettlerParts {
  readonly ledger: DeliveryLedger<HeldDelivery>;
  readonly names: Names;
  readonly offsets: OffsetCommitter;
  /** The started transport's sender (throws before start). */
  readonly sender: () => ResultSender;
  /** Set in exactlyOnce mode once started. */
  readonly committer: () => TransactionalCommitter | undefined;
  /** Whether the delivery's partition is still the transport's, in the assignment that delivered it. */
  readonly holds: (entry: HeldDelivery) => boolean;
  /** Settled deliveries of these partitions no longer count against their fetch pause bounds. */
  readonly liftBounds: (parts: ReadonlySet<HeldPartition>) => void;
}

/**
 * KafkaTransport.settle: publishes outcomes (results and DLQ records) and acknowledges their
 * deliveries. At-least-once, straight through ResultSender, then commits each partition's
 * contiguous settled prefix; exactly-once, into the partition trackers, where the committer's
 * transactions take them together with their offsets.
 */
export class OutcomeSettler {
  constructor(private readonly o: OutcomeSettlerParts) {}

  /** Transport.settle of a transport that is not closed. */
  settle(outcomes: readonly Outcome[], options: SettleOptions = {}): Promise<void> {
    const waiting = options.onWaitingForCreation ?? ((): void => undefined);
    const run = (dropDlqValue: boolean): Promise<void> =>
      this.o.committer() === undefined ? this.settleAtLeastOnce(outcomes, dropDlqValue, waiting) : this.settleExactlyOnce(outcomes, dropDlqValue, waiting);
    return this.o.ledger.guard(
      outcomes.map((o) => o.delivery.deliveryId),
      () =>
        run(false).catch((err: unknown) => {
          // One outcome whose records the broker refused as too big (the runtime settles such a
          // batch apart): when it carries the request's bytes to the DLQ, those may be what the
          // DLQ topic cannot take. Its replacement result would carry them too and be refused
          // for ever, holding its partition's commits; the record goes without them instead.
          if (outcomes.length === 1 && isMessageSizeRefusal(err) && this.deadLettersBytes(outcomes[0] as Outcome)) return run(true);
          throw err;
        }),
    );
  }

  private deadLettersBytes(outcome: Outcome): boolean {
    const entry = this.o.ledger.get(outcome.delivery.deliveryId);
    if (entry === undefined || entry.source.value.length === 0) return false;
    return messagesFor(outcome, entry.source, this.o.names).some((m) => m.topic === this.o.names.dlq(outcome.delivery.model));
  }

  private async settleAtLeastOnce(outcomes: readonly Outcome[], dropDlqValue: boolean, waiting: (waitsForOthers: boolean) => void): Promise<void> {
    const { claimed, rejected } = this.o.ledger.claim(outcomes.map((o) => ({ deliveryId: o.delivery.deliveryId, outcome: o })));
    if (claimed.length > 0) {
      const sender = this.o.sender();
      const perClaim = claimed.map((c) => ({ ...c, messages: messagesFor(c.item.outcome, c.entry.source, this.o.names, { dropDlqValue }) }));
      let ready = true;
      for (const c of perClaim) if (!sender.ready(c.messages)) ready = false;
      // Straight into the serialized send path: results leave in settle order, so one stream's
      // results stay in order (also those waiting for their reply topic, see ResultSender.send).
      if (ready) await this.publish(sender, perClaim);
      else await this.publishAroundCreations(sender, perClaim, waiting);
    }
    // Also when everything was skipped: a retry whose deliveries a failed call published, or a
    // retry after a failed commit, commits now (nothing to do costs no round trip).
    await this.o.offsets.commit();
    if (rejected.length > 0) throw notOpenError(rejected);
  }

  /**
   * Some results name a reply topic that does not exist yet: each of those waits for its topic
   * apart (ResultSender.send), and the others of the settle go now. Once those are out, their
   * offsets are committed (as far as the contiguous prefix goes) and the caller is told the rest
   * only waits for creations (`waiting`). A creation the broker refuses for good fails its own
   * results only, with that refusal (the runtime then settles them apart).
   */
  private async publishAroundCreations(sender: ResultSender, perClaim: readonly PublishClaim[], waiting: (waitsForOthers: boolean) => void): Promise<void> {
    const now = perClaim.filter((c) => sender.ready(c.messages));
    // Only a settle asking for a creation no other waits for gives its slot up: a stream of results
    // for one new topic (a settle every linger) otherwise piled up unbounded settles that all ended
    // together after it, and the Kafka priority drill's p0 p99 rose past 2x of idle (2 of 5 runs).
    const asksFirst = perClaim.some((c) => !now.includes(c) && !sender.awaited(c.messages));
    // Started first: the creations run while the others are sent.
    const later = perClaim.filter((c) => !now.includes(c)).map((c) => this.publish(sender, [c]));
    const first = this.publish(sender, now);
    // Handled from the start: a creation the broker refuses at once (an invalid topic name) rejects
    // its result while `first` is still awaited, and a rejection with no handler by then ends the
    // worker process (Node's default --unhandled-rejections=throw).
    const all = Promise.allSettled([first, ...later]);
    const nowSent = await first.then(
      () => true,
      () => false,
    );
    if (nowSent) {
      // A failed commit is tried again after the rest (settleAtLeastOnce), which reports it.
      await this.o.offsets.commit().catch(() => undefined);
      if (asksFirst) waiting(false);
    }
    const results = await all;
    const failures = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => FleetError.from(r.reason, 'TRANSPORT_ERROR'));
    const failed = failures.find((e) => !e.retriable) ?? failures[0];
    if (failed !== undefined) throw failed;
  }

  /** Publishes the claims' records; done once the brokers acknowledged them. */
  private async publish(sender: ResultSender, list: readonly PublishClaim[]): Promise<void> {
    if (list.length === 0) return;
    try {
      await sender.send(list.flatMap((c) => c.messages));
    } catch (err) {
      // Those whose records the brokers acknowledged before the failure are done: the failed
      // call's retry (the runtime settles a refused batch again one outcome at a time) skips
      // them instead of publishing their results twice.
      const published = list.filter((c) => c.messages.every((m) => sender.acknowledged(m)));
      this.published(published);
      for (const c of list) if (!published.includes(c)) this.o.ledger.unclaim(c.item.deliveryId);
      throw kafkaError(err, 'publishing results failed; the requests stay unacked');
    }
    this.published(list);
  }

  private published(list: readonly PublishClaim[]): void {
    const touched = new Set<HeldPartition>();
    for (const { item, entry } of list) {
      entry.tracker.settle(entry.source.offset);
      this.o.ledger.finish(item.deliveryId);
      touched.add(entry.part);
    }
    this.o.liftBounds(touched);
  }

  private async settleExactlyOnce(outcomes: readonly Outcome[], dropDlqValue: boolean, waiting: (waitsForOthers: boolean) => void): Promise<void> {
    const claims = this.o.ledger.claim(outcomes.map((o) => ({ deliveryId: o.delivery.deliveryId, outcome: o })));
    const { rejected } = claims;
    // Revoked since delivered: the new owner answers it (see TransactionalCommitter.revoke).
    const claimed = claims.claimed.filter(({ item, entry }) => {
      if (this.o.holds(entry)) return true;
      this.o.ledger.finish(item.deliveryId);
      return false;
    });
    const sender = this.o.sender();
    const prepared = claimed.map((c) => ({ ...c, messages: messagesFor(c.item.outcome, c.entry.source, this.o.names, { dropDlqValue }) }));
    // Set as soon as a result of this call was not written (its transaction failed).
    let failedHere: FleetError | undefined;
    const place = ({ item, entry, messages }: PublishClaim): Promise<void> =>
      placeForTransaction(entry, messages, {
        holds: () => this.o.holds(entry),
        kick: () => this.o.committer()?.kick(),
        finish: () => this.o.ledger.finish(item.deliveryId),
        unclaim: () => {
          failedHere ??= new FleetError('TRANSPORT_ERROR', 'not published: another result of the same settle was not; settle again', { retriable: true });
          this.o.ledger.unclaim(item.deliveryId);
        },
      });
    // A result whose reply topic is new joins a transaction once the topic exists, so the
    // transactions of the others do not wait for its creation; those behind it in its partition
    // wait anyway (the contiguous prefix). A failed creation places it all the same: the
    // transaction then tries the topic again and fails as it always did (the committer finds the
    // refused one alone, see TransactionalCommitter.loop).
    const placeOnceCreated = (c: PublishClaim): Promise<void> => {
      const placeNow = (): Promise<void> => {
        // Revoked meanwhile: the new owner answers it.
        if (!this.o.holds(c.entry)) {
          this.o.ledger.finish(c.item.deliveryId);
          return Promise.resolve();
        }
        // An earlier result of this call failed: placed behind it in its partition, this one
        // would wait until that one is settled again, by this call's retry, which cannot start
        // before this call returns. It goes again with it.
        if (failedHere !== undefined) {
          this.o.ledger.unclaim(c.item.deliveryId);
          return Promise.reject(failedHere);
        }
        const placed = place(c);
        this.o.committer()?.kick();
        return placed;
      };
      return sender.whenReady(c.messages).then(placeNow, placeNow);
    };
    const readyNow = prepared.map((c) => sender.ready(c.messages));
    const waits = prepared.map((c, i) => (readyNow[i] === true ? place(c) : placeOnceCreated(c)));
    this.o.committer()?.kick();
    // Settled counts as done for the in-flight bound (the transaction follows), as in at-least-once
    // mode: a paused partition fetches nothing, so no later batch would lift it.
    this.o.liftBounds(new Set(claimed.map((c) => c.entry.part)));
    // Placed (or waiting for their reply topics): what is left waits for transactions, and a
    // transaction takes a partition's contiguous settled prefix only, so a result placed behind one
    // the runtime has not settled yet waits for it. Holding the caller's slot meanwhile hung the
    // publisher for good once every slot was held so: 4 new reply topics at once did it, and so did
    // 4 settles of later offsets reaching it before an earlier offset's (an expired/invalid answer
    // goes out at once; two batches in flight). Such settles are bounded by the in-flight bounds.
    if (prepared.length > 0) waiting(true);
    const results = await Promise.allSettled(waits);
    const failures = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => FleetError.from(r.reason, 'TRANSPORT_ERROR'));
    // A refusal for good first: the runtime then settles these apart, and the refused one alone is replaced.
    const failed = failures.find((e) => !e.retriable) ?? failures[0];
    if (failed !== undefined) throw failed;
    if (rejected.length > 0) throw notOpenError(rejected);
  }
}
