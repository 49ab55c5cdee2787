import { randomUUID } from 'node:crypto';
import type { Admin, Consumer, EachBatchPayload, Kafka } from 'kafkajs';
import type { KafkaSettings } from '../../contracts/fleet-config.ts';
import { FleetError } from '../../errors/fleet-error.ts';
import { closedError, DeliveryLedger, notOpenError } from '../delivery-ledger.ts';
import { renderName, replyTopicPattern, requestSources, type SourceName } from '../names.ts';
import type { Delivery, Outcome, Transport, TransportStartOptions } from '../transport.ts';
import type { ConsumerWatch } from './consumer-watch.ts';
import { createKafka, ensureTopics, kafkaError, startFailure } from './kafka-client.ts';
import { placeForTransaction } from './eos-placement.ts';
import { TransactionalCommitter, type EosPayload, type TrackedPartition } from './kafka-eos.ts';
import { messagesFor, type KafkaSource, type Names, type OutgoingMessage } from './kafka-outcomes.ts';
import { FetchPauses } from './fetch-pauses.ts';
import { consumerLag, OffsetCommitter, tpKey } from './offset-committer.ts';
import { PartitionTracker } from './partition-tracker.ts';
import { predecessorMembers, predecessorMembersNote, removePredecessorMembers } from './predecessor-members.ts';
import { RedeliveryHints } from './redelivery-hints.ts';
import { contactWindowFor, RequestConsumer } from './request-consumer.ts';
import { ResultSender } from './result-sender.ts';
import type { KafkaTransportOptions } from './kafka-transport-options.ts';
import { revokedDeliveries } from './revoked-deliveries.ts';

export type { KafkaTransportOptions } from './kafka-transport-options.ts';

interface Entry {
  readonly source: KafkaSource;
  /** The partition it came from, of the latest assignment that delivered it (see onBatch). */
  tracker: PartitionTracker<EosPayload>;
  part: Partition;
}

interface Partition extends TrackedPartition {
  readonly priority: number | undefined;
}

/** A claimed delivery of an at-least-once settle with the records its outcome produces. */
interface PublishClaim {
  readonly item: { readonly deliveryId: string };
  readonly entry: Entry;
  readonly messages: OutgoingMessage[];
}

const EMPTY = Buffer.alloc(0);

/** The broker refused a record as over its message size limit (see kafkaError). */
const isMessageSizeRefusal = (err: unknown): boolean => err instanceof FleetError && err.details['limit'] === 'message-size';

/**
 * Kafka transport (kafkajs). Request topics per model and priority; the eachBatch callback only
 * records offsets and hands the messages to the runtime, so heartbeats and fetches keep flowing
 * while the device works. autoCommit is off: a partition's offset is committed up to the
 * contiguous prefix of settled deliveries, after their results are acknowledged by the brokers
 * (acks=all). With `exactlyOnce`, results and offsets go in one transaction instead.
 */
export class KafkaTransport implements Transport {
  readonly kind = 'kafka' as const;
  private readonly kafka: Kafka;
  private readonly names: Names;
  private readonly ledger = new DeliveryLedger<Entry>();
  private readonly partitions = new Map<string, Partition>();
  private sources = new Map<string, SourceName>();
  private consumer: Consumer | undefined;
  private sender: ResultSender | undefined;
  private admin: Admin | undefined;
  private committer: TransactionalCommitter | undefined;
  private onDeliveries: ((d: Delivery[]) => void) | undefined;
  private readonly offsets = new OffsetCommitter(this.partitions, () => this.consumer, () => this.committer === undefined);
  private readonly hints: RedeliveryHints;
  private closed = false;
  private watch: ConsumerWatch | undefined;
  private contactWindowMs = 5_000;
  private onFatal: ((err: FleetError) => void) | undefined;
  private onRevoked: ((deliveryIds: ReadonlySet<string>) => void) | undefined;
  private readonly pauses: FetchPauses;
  private readonly transactionalId: string;

  constructor(
    private readonly settings: KafkaSettings,
    private readonly options: KafkaTransportOptions = {},
  ) {
    this.kafka = createKafka(settings, options.logger, options.retries, options.socketFactory);
    this.names = {
      replies: (model) => renderName(settings.repliesTemplate, model),
      dlq: (model) => renderName(settings.dlqTemplate, model),
      resultHeaders: options.resultHeaders ?? false,
      ...(settings.replyTopicPattern === undefined ? {} : { replyPattern: replyTopicPattern(settings.replyTopicPattern) }),
    };
    this.pauses = new FetchPauses(
      () => this.consumer,
      () => this.closed,
      { lowPriorityInflight: options.lowPriorityInflightPerPartition ?? 256, topPriorityInflight: options.inflightPerPartition ?? 8192 },
      options.logger,
    );
    this.hints = new RedeliveryHints({
      admin: () => this.admin,
      groupId: settings.groupId,
      requestTopics: () => [...this.sources.keys()],
      holds: (key) => this.partitions.has(key),
      offsets: this.offsets,
      logger: options.logger,
    });
    // One id for every producer this transport starts: a replacement fences its predecessor.
    this.transactionalId = `${settings.clientId}.${settings.groupId}.${options.instanceId ?? randomUUID()}`;
  }

  async start(options: TransportStartOptions): Promise<void> {
    if (this.closed) throw closedError(this.kind);
    if (this.consumer !== undefined) throw new FleetError('INVALID_ARGUMENT', 'kafka transport already started');
    this.onDeliveries = options.onDeliveries;
    this.onFatal = options.onFatal;
    this.onRevoked = options.onRevoked;
    this.sources = requestSources(this.settings.topicTemplate, options.subscriptions);
    const models = options.subscriptions.map((s) => s.model);
    // Alongside the set-up below; awaited before this consumer joins (see removePredecessorMembers).
    const predecessorsRemoved = removePredecessorMembers(this.kafka, predecessorMembers(options.predecessor?.previous), this.options.logger);
    try {
      this.admin = this.kafka.admin();
      await this.admin.connect();
      const topics = [...this.sources.keys(), ...models.map(this.names.replies), ...models.map(this.names.dlq)];
      await ensureTopics(this.admin, topics, this.options.partitions ?? 8);
      // Set before the sender: the result producer is held to the consumer's contact window.
      this.contactWindowMs = contactWindowFor(this.settings).contactWindowMs;
      const sender = new ResultSender(this.kafka, this.settings, this.admin, {
        transactionalId: this.transactionalId,
        partitions: this.options.partitions ?? 8,
        contactWindowMs: this.contactWindowMs,
        ...(this.options.logger === undefined ? {} : { logger: this.options.logger }),
      });
      this.sender = sender;
      await sender.connect(topics);
      if (this.settings.exactlyOnce) this.committer = new TransactionalCommitter(this.settings.groupId, () => this.partitions.values(), sender);

      const requests = new RequestConsumer({
        kafka: this.kafka,
        settings: this.settings,
        requestTopics: () => [...this.sources.keys()],
        partitions: this.options.partitions ?? 8,
        maxWaitTimeMs: this.options.maxWaitTimeMs ?? 100,
        maxBytesPerPartition: this.options.maxBytesPerPartition ?? 1_048_576,
        logger: this.options.logger,
        isClosed: () => this.closed,
        onFatal: (err) => this.onFatal?.(err),
        onRebalancing: () => this.committer?.rebalanceStarted(),
        onJoin: ({ groupId, memberId, memberAssignment }) => {
          this.onAssignment(memberAssignment);
          // On every join: a member that lost its session rejoins under a new id. This one consumer
          // is the transport's only group member.
          options.predecessor?.save(predecessorMembersNote([{ groupId, memberId }]));
        },
        eachBatch: async (payload) => {
          // Once per rebalance: one admin round trip for the redelivery hints, then never waits.
          if (this.hints.loaded !== undefined) await this.hints.loaded;
          this.onBatch(payload);
        },
      });
      this.consumer = requests.consumer;
      this.watch = requests.watch;
      await predecessorsRemoved;
      await requests.run();
    } catch (err) {
      // Nothing was delivered yet: drop the connections, or they would keep the process alive.
      this.closed = true;
      await this.disconnect();
      throw kafkaError(err, startFailure('starting the kafka transport failed', err, this.settings));
    }
  }

  private onAssignment(assignment: Record<string, number[]>): void {
    const assigned = new Set<string>();
    for (const [topic, parts] of Object.entries(assignment)) for (const p of parts) assigned.add(tpKey(topic, p));
    // Revoked partitions: the new owner commits them. At-least-once, their deliveries still get
    // results (and may be answered again); exactly-once, only the new owner answers them.
    const revoked: Partition[] = [];
    for (const [key, part] of [...this.partitions]) {
      if (!assigned.has(key)) {
        this.partitions.delete(key);
        this.offsets.forget(key);
        revoked.push(part);
      }
    }
    this.committer?.revoke(revoked);
    this.committer?.assigned();
    const lost = revokedDeliveries(this.ledger, new Set(revoked));
    if (lost.size > 0) this.onRevoked?.(lost);
    this.pauses.reassigned(assigned, this.sources.keys());
    this.hints.load(assigned);
  }

  private onBatch({ batch }: EachBatchPayload): void {
    const source = this.sources.get(batch.topic);
    if (source === undefined || this.pauses.stopped || this.closed) return;
    const part = this.partitionFor(batch.topic, batch.partition, source.priority);
    const key = tpKey(batch.topic, batch.partition);
    const hint = this.hints.highestDelivered(key);
    const now = Date.now();
    const deliveries: Delivery[] = [];
    for (const m of batch.messages) {
      const offset = Number(m.offset);
      if (!part.tracker.deliver(offset)) continue;
      const deliveryId = `${batch.topic}/${batch.partition}/${offset}`;
      const held = this.ledger.get(deliveryId);
      if (held !== undefined) {
        // Still open here from an earlier assignment of this partition (it moved away and came
        // back before this worker answered it): the runtime has it, so it is not handed over
        // again, and its settle now counts for this assignment. A second entry under the same id
        // would be dropped by the first one's settle and hold the partition's commits for good.
        held.tracker = part.tracker;
        held.part = part;
        continue;
      }
      const value = m.value ?? EMPTY;
      this.ledger.add(deliveryId, {
        source: { topic: batch.topic, partition: batch.partition, offset, key: m.key, headers: m.headers, value },
        tracker: part.tracker,
        part,
      });
      deliveries.push({
        deliveryId,
        model: source.model,
        priority: source.priority,
        body: value,
        receivedAt: now,
        redelivered: offset <= hint,
        suspectCount: offset <= hint ? this.offsets.suspectCount(key, offset) : 0,
      });
    }
    this.pauses.bound(part);
    if (deliveries.length === 0) return;
    try {
      this.onDeliveries?.(deliveries);
    } catch (err) {
      this.options.logger?.error({ err }, 'onDeliveries threw; its deliveries stay unacked until settled or released');
    }
  }

  private partitionFor(topic: string, partition: number, priority: number | undefined): Partition {
    const key = tpKey(topic, partition);
    let p = this.partitions.get(key);
    if (p === undefined) {
      p = { topic, partition, priority, tracker: new PartitionTracker<EosPayload>() };
      this.partitions.set(key, p);
    }
    return p;
  }

  private topicsOf(model: string, priorities: readonly number[]): string[] {
    const out: string[] = [];
    for (const s of this.sources.values()) {
      if (s.model !== model) continue;
      // One topic for all priorities (template without {priority}): it pauses with priority 0.
      if (s.priority === undefined ? priorities.includes(0) : priorities.includes(s.priority)) out.push(s.name);
    }
    return out;
  }

  pause(model: string, priorities: readonly number[]): void {
    this.pauses.pause(this.topicsOf(model, priorities));
  }

  resume(model: string, priorities: readonly number[]): void {
    this.pauses.resume(this.topicsOf(model, priorities));
  }

  settle(outcomes: readonly Outcome[]): Promise<void> {
    if (this.closed) return Promise.reject(closedError(this.kind));
    const run = (dropDlqValue: boolean): Promise<void> =>
      this.committer === undefined ? this.settleAtLeastOnce(outcomes, dropDlqValue) : this.settleExactlyOnce(outcomes, dropDlqValue);
    return this.ledger.guard(
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
    const entry = this.ledger.get(outcome.delivery.deliveryId);
    if (entry === undefined || entry.source.value.length === 0) return false;
    return messagesFor(outcome, entry.source, this.names).some((m) => m.topic === this.names.dlq(outcome.delivery.model));
  }

  private startedSender(): ResultSender {
    if (this.sender === undefined) throw new FleetError('TRANSPORT_ERROR', 'kafka transport is not started: nothing can be published yet');
    return this.sender;
  }

  private async settleAtLeastOnce(outcomes: readonly Outcome[], dropDlqValue: boolean): Promise<void> {
    const { claimed, rejected } = this.ledger.claim(outcomes.map((o) => ({ deliveryId: o.delivery.deliveryId, outcome: o })));
    if (claimed.length > 0) {
      const sender = this.startedSender();
      const perClaim = claimed.map((c) => ({ ...c, messages: messagesFor(c.item.outcome, c.entry.source, this.names, { dropDlqValue }) }));
      let ready = true;
      for (const c of perClaim) if (!sender.ready(c.messages)) ready = false;
      // Straight into the serialized send path: results leave in settle order, so one stream's
      // results stay in order (also those waiting for their reply topic, see ResultSender.send).
      if (ready) await this.publish(sender, perClaim);
      else await this.publishAroundCreations(sender, perClaim);
    }
    // Also when everything was skipped: a retry whose deliveries a failed call published, or a
    // retry after a failed commit, commits now (nothing to do costs no round trip).
    await this.offsets.commit();
    if (rejected.length > 0) throw notOpenError(rejected);
  }

  /**
   * Some results name a reply topic that does not exist yet: each of those waits for its topic
   * apart (ResultSender.send), and the others of the settle go now. A creation the broker refuses
   * for good fails its own results only, with that refusal (the runtime then settles them apart).
   */
  private async publishAroundCreations(sender: ResultSender, perClaim: readonly PublishClaim[]): Promise<void> {
    const now = perClaim.filter((c) => sender.ready(c.messages));
    const waiting = perClaim.filter((c) => !now.includes(c));
    const results = await Promise.allSettled([this.publish(sender, now), ...waiting.map((c) => this.publish(sender, [c]))]);
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
      for (const c of list) if (!published.includes(c)) this.ledger.unclaim(c.item.deliveryId);
      throw kafkaError(err, 'publishing results failed; the requests stay unacked');
    }
    this.published(list);
  }

  private published(list: readonly PublishClaim[]): void {
    const touched = new Set<Partition>();
    for (const { item, entry } of list) {
      entry.tracker.settle(entry.source.offset);
      this.ledger.finish(item.deliveryId);
      touched.add(entry.part);
    }
    this.liftBounds(touched);
  }

  private async settleExactlyOnce(outcomes: readonly Outcome[], dropDlqValue: boolean): Promise<void> {
    const claims = this.ledger.claim(outcomes.map((o) => ({ deliveryId: o.delivery.deliveryId, outcome: o })));
    const { rejected } = claims;
    // Revoked since delivered: the new owner answers it (see TransactionalCommitter.revoke).
    const claimed = claims.claimed.filter(({ item, entry }) => {
      if (this.holds(entry)) return true;
      this.ledger.finish(item.deliveryId);
      return false;
    });
    const sender = this.startedSender();
    const prepared = claimed.map((c) => ({ ...c, messages: messagesFor(c.item.outcome, c.entry.source, this.names, { dropDlqValue }) }));
    const place = ({ item, entry, messages }: PublishClaim): Promise<void> =>
      placeForTransaction(entry, messages, {
        holds: () => this.holds(entry),
        kick: () => this.committer?.kick(),
        finish: () => this.ledger.finish(item.deliveryId),
        unclaim: () => this.ledger.unclaim(item.deliveryId),
      });
    // A result whose reply topic is new joins a transaction once the topic exists, so the
    // transactions of the others do not wait for its creation; those behind it in its partition
    // wait anyway (the contiguous prefix). A failed creation places it all the same: the
    // transaction then tries the topic again and fails as it always did (the committer finds the
    // refused one alone, see TransactionalCommitter.loop).
    const placeOnceCreated = (c: PublishClaim): Promise<void> => {
      const placeNow = (): Promise<void> => {
        // Revoked meanwhile: the new owner answers it.
        if (!this.holds(c.entry)) {
          this.ledger.finish(c.item.deliveryId);
          return Promise.resolve();
        }
        const placed = place(c);
        this.committer?.kick();
        return placed;
      };
      return sender.whenReady(c.messages).then(placeNow, placeNow);
    };
    const waits = prepared.map((c) => (sender.ready(c.messages) ? place(c) : placeOnceCreated(c)));
    this.committer?.kick();
    // Settled counts as done for the in-flight bound (the transaction follows), as in at-least-once
    // mode: a paused partition fetches nothing, so no later batch would lift it.
    this.liftBounds(new Set(claimed.map((c) => c.entry.part)));
    const results = await Promise.allSettled(waits);
    const failures = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => FleetError.from(r.reason, 'TRANSPORT_ERROR'));
    // A refusal for good first: the runtime then settles these apart, and the refused one alone is replaced.
    const failed = failures.find((e) => !e.retriable) ?? failures[0];
    if (failed !== undefined) throw failed;
    if (rejected.length > 0) throw notOpenError(rejected);
  }

  /** Whether the delivery's partition is still this worker's, in the assignment that delivered it. */
  private holds(entry: Entry): boolean {
    return this.partitions.get(tpKey(entry.source.topic, entry.source.partition)) === entry.part;
  }

  private liftBounds(parts: ReadonlySet<Partition>): void {
    // Still assigned to this worker (not revoked since): its pause bound may lift now.
    for (const part of parts) if (this.partitions.get(tpKey(part.topic, part.partition)) === part) this.pauses.bound(part);
  }

  async release(deliveries: readonly Delivery[]): Promise<void> {
    const { claimed, rejected } = this.ledger.claim(deliveries);
    for (const { item, entry } of claimed) {
      entry.tracker.release(entry.source.offset);
      this.ledger.finish(item.deliveryId);
    }
    if (rejected.length > 0) throw notOpenError(rejected);
  }

  async markSuspect(deliveries: readonly Delivery[]): Promise<boolean> {
    // A plain commit could move the position past a transaction still in flight (lost if it
    // aborts), and kafkajs's TxnOffsetCommit carries no metadata: the worker's journal keeps them.
    if (this.committer !== undefined) return false;
    const offsets: Array<{ key: string; offset: number }> = [];
    for (const d of deliveries) {
      const entry = this.ledger.get(d.deliveryId);
      if (entry !== undefined && this.partitions.has(tpKey(entry.source.topic, entry.source.partition))) {
        offsets.push({ key: tpKey(entry.source.topic, entry.source.partition), offset: entry.source.offset });
      }
    }
    if (offsets.length > 0) await this.offsets.markSuspect(offsets);
    // A revoked partition's message goes to its new owner without this count.
    return offsets.length === deliveries.length;
  }

  /** Consumer in contact, and results getting out whenever there are results to send (see ProducerWatch). */
  connected(): boolean {
    return !this.closed && this.watch?.inContact(this.contactWindowMs) === true && this.sender?.delivering() !== false;
  }

  async stopIntake(): Promise<void> {
    this.pauses.stop(this.sources.keys());
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.stopIntake();
    // Before waiting for the settles in flight: an exactly-once settle stuck behind a delivery that
    // nobody settles would never finish.
    await this.committer?.close();
    await this.ledger.quiesce();
    await this.offsets.commit().catch((err: unknown) => this.options.logger?.warn({ err }, 'final commit failed'));
    // Whatever is still open is left uncommitted: the group hands it to another worker.
    for (const [id, entry] of this.ledger.entries()) {
      entry.tracker.release(entry.source.offset);
      this.ledger.forget(id);
    }
    this.closed = true;
    await this.disconnect();
  }

  /** Simulates a crash: no commit, no release; the group redelivers everything uncommitted. */
  async abort(): Promise<void> {
    this.closed = true;
    for (const [id] of this.ledger.entries()) this.ledger.forget(id);
    await this.disconnect();
  }

  private async disconnect(): Promise<void> {
    await Promise.allSettled([this.consumer?.disconnect(), this.sender?.disconnect(), this.admin?.disconnect()]);
  }

  async sourceLag(): Promise<Record<string, number>> {
    if (this.admin === undefined) return {};
    return consumerLag(this.admin, this.settings.groupId, new Map([...this.sources].map(([topic, s]) => [topic, s.model])));
  }
}
