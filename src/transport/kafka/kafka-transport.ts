import { randomUUID } from 'node:crypto';
import type { Admin, Consumer, EachBatchPayload, Kafka } from 'kafkajs';
import type { KafkaSettings } from '../../contracts/fleet-config.ts';
import { FleetError } from '../../errors/fleet-error.ts';
import { closedError, DeliveryLedger, notOpenError } from '../delivery-ledger.ts';
import { renderName, replyTopicPattern, requestSources, type SourceName } from '../names.ts';
import type { Delivery, Outcome, SettleOptions, Transport, TransportStartOptions } from '../transport.ts';
import type { ConsumerWatch } from './consumer-watch.ts';
import { createKafka, ensureTopics, kafkaError, startFailure } from './kafka-client.ts';
import { committedOffsetsVia, TransactionalCommitter, type EosPayload } from './kafka-eos.ts';
import { GroupLease } from './group-lease.ts';
import type { Names } from './kafka-outcomes.ts';
import { FetchPauses } from './fetch-pauses.ts';
import { fetchBytesPerPartition, largestMessageBytes, mayRaise } from './fetch-size.ts';
import { consumerLag, OffsetCommitter, tpKey } from './offset-committer.ts';
import { OutcomeSettler, type HeldDelivery, type HeldPartition } from './outcome-settler.ts';
import { PartitionTracker } from './partition-tracker.ts';
import { fencePredecessorTransaction, predecessorMembers, predecessorMembersNote, predecessorTransactionalId, removePredecessorMembers } from './predecessor-members.ts';
import { StaleMemberRemover } from './stale-member-remover.ts';
import { RedeliveryHints } from './redelivery-hints.ts';
import type { LostMemberRestarter } from './lost-member-watch.ts';
import { contactWindowFor, RequestConsumer } from './request-consumer.ts';
import { ResultSender } from './result-sender.ts';
import type { KafkaTransportOptions } from './kafka-transport-options.ts';
import { revokedDeliveries } from './revoked-deliveries.ts';

export type { KafkaTransportOptions } from './kafka-transport-options.ts';

const EMPTY = Buffer.alloc(0);

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
  private readonly ledger = new DeliveryLedger<HeldDelivery>();
  private readonly partitions = new Map<string, HeldPartition>();
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
  private restarter: LostMemberRestarter | undefined;
  private contactWindowMs = 5_000;
  private onFatal: ((err: FleetError) => void) | undefined;
  private onRevoked: ((deliveryIds: ReadonlySet<string>) => void) | undefined;
  private readonly pauses: FetchPauses;
  private readonly transactionalId: string;
  /** The request consumer's member id at its last join. */
  private memberId: string | undefined;
  private readonly settler: OutcomeSettler;
  private fetchBytes: number | undefined;
  private warnedLargeRequest = false;

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
    this.settler = new OutcomeSettler({
      ledger: this.ledger,
      names: this.names,
      offsets: this.offsets,
      sender: () => this.startedSender(),
      committer: () => this.committer,
      holds: (entry) => this.holds(entry),
      liftBounds: (parts) => this.liftBounds(parts),
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
    // Exactly-once: a transaction the dead predecessor left open is aborted before this one's first.
    const predecessorFenced = this.settings.exactlyOnce
      ? fencePredecessorTransaction(this.kafka, predecessorTransactionalId(options.predecessor?.previous), this.settings, this.options.logger)
      : Promise.resolve(false);
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
        ...(this.options.retries === undefined ? {} : { retries: this.options.retries }),
        ...(this.options.logger === undefined ? {} : { logger: this.options.logger }),
      });
      this.sender = sender;
      await sender.connect(topics);
      // The group's offsets as the broker has them: a commit whose answer was lost is told from one
      // that did not happen, so its results are not written again by the settle retried after it.
      // Exactly-once: a worker evicted without knowing it (a stalled process) must not commit (GroupLease).
      const { heartbeatIntervalMs } = contactWindowFor(this.settings);
      const lease = this.settings.exactlyOnce ? new GroupLease(this.settings.sessionTimeoutMs, 2 * heartbeatIntervalMs) : undefined;
      if (lease !== undefined) {
        this.committer = new TransactionalCommitter(this.settings.groupId, () => this.partitions.values(), sender, committedOffsetsVia(this.admin), lease);
      }

      this.fetchBytes = await this.fetchSize();
      const requests = new RequestConsumer({
        kafka: this.kafka,
        settings: this.settings,
        requestTopics: () => [...this.sources.keys()],
        partitions: this.options.partitions ?? 8,
        maxWaitTimeMs: this.options.maxWaitTimeMs ?? 100,
        maxBytesPerPartition: this.fetchBytes,
        logger: this.options.logger,
        isClosed: () => this.closed,
        intakeStopped: () => this.pauses.stopped,
        onFatal: (err) => this.onFatal?.(err),
        onRebalancing: () => this.committer?.rebalanceStarted(),
        onJoin: ({ groupId, memberId, memberAssignment }) => {
          // Exactly-once, joined under a new member id: the group had forgotten this worker (a session
          // run out, a consumer kafkajs restarted), and a partition of both assignments may have been
          // another worker's meanwhile, its requests answered and committed there: nothing is kept.
          const forgotten = this.settings.exactlyOnce && this.memberId !== undefined && memberId !== this.memberId;
          this.memberId = memberId;
          this.onAssignment(memberAssignment, forgotten);
          // On every join: a member that lost its session rejoins under a new id. This one consumer
          // is the transport's only group member.
          options.predecessor?.save(predecessorMembersNote([{ groupId, memberId }], this.settings.exactlyOnce ? this.transactionalId : undefined));
        },
        eachBatch: async (payload) => {
          // Once per rebalance: one admin round trip for the redelivery hints, then never waits.
          if (this.hints.loaded !== undefined) await this.hints.loaded;
          this.onBatch(payload);
        },
      });
      this.consumer = requests.consumer;
      lease?.watch(requests.consumer);
      new StaleMemberRemover(this.kafka, this.options.logger, () => this.closed).watch(requests.consumer);
      this.watch = requests.watch;
      this.restarter = requests.restarter;
      await predecessorsRemoved;
      await predecessorFenced;
      await requests.run();
    } catch (err) {
      // Nothing was delivered yet: drop the connections, or they would keep the process alive.
      this.closed = true;
      await this.disconnect();
      throw kafkaError(err, startFailure('starting the kafka transport failed', err, this.settings));
    }
  }

  /** The consumer's per-partition fetch size, once started: the configured one or the floor above it. */
  get fetchBytesPerPartition(): number | undefined {
    return this.fetchBytes;
  }

  private async fetchSize(): Promise<number> {
    const configured = this.options.maxBytesPerPartition ?? 1_048_576;
    const largest = this.options.largestRequestBytes;
    if (this.admin === undefined || !mayRaise(configured, largest)) return configured;
    const topicMaxBytes = await largestMessageBytes(this.admin, [...this.sources.keys()]);
    const bytes = fetchBytesPerPartition(configured, largest, topicMaxBytes);
    if (bytes > configured) {
      this.options.logger?.info(
        { maxBytesPerPartition: configured, largestRequestBytes: largest, topicMaxMessageBytes: topicMaxBytes, fetchBytesPerPartition: bytes },
        `transport.kafka.maxBytesPerPartition (${configured}) is below the largest request the served models allow (${largest} bytes); ` +
          `fetching ${bytes} bytes per partition instead, or such requests would come one per fetch round trip`,
      );
    }
    return bytes;
  }

  /** `keepNone`: every partition held counts as revoked, also those assigned again. */
  private onAssignment(assignment: Record<string, number[]>, keepNone = false): void {
    const assigned = new Set<string>();
    for (const [topic, parts] of Object.entries(assignment)) for (const p of parts) assigned.add(tpKey(topic, p));
    const kept = keepNone ? new Set<string>() : assigned;
    // Revoked partitions: the new owner commits them. At-least-once, their deliveries still get
    // results (and may be answered again); exactly-once, only the new owner answers them.
    const revoked: HeldPartition[] = [];
    for (const [key, part] of [...this.partitions]) {
      if (!kept.has(key)) {
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
      if (value.length > (this.fetchBytes ?? Infinity) && !this.warnedLargeRequest) this.warnLargeRequest(batch.topic, value.length);
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

  private warnLargeRequest(topic: string, bytes: number): void {
    this.warnedLargeRequest = true;
    this.options.logger?.warn(
      { topic, requestBytes: bytes, fetchBytesPerPartition: this.fetchBytes },
      `a request of ${bytes} bytes is larger than the fetch size per partition (${this.fetchBytes ?? 0}): while requests like it wait on ` +
        `several partitions, they come one per fetch round trip. Raise transport.kafka.maxBytesPerPartition above the largest request ` +
        `(logged once)`,
    );
  }

  private partitionFor(topic: string, partition: number, priority: number | undefined): HeldPartition {
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

  settle(outcomes: readonly Outcome[], options?: SettleOptions): Promise<void> {
    if (this.closed) return Promise.reject(closedError(this.kind));
    return this.settler.settle(outcomes, options);
  }

  private startedSender(): ResultSender {
    if (this.sender === undefined) throw new FleetError('TRANSPORT_ERROR', 'kafka transport is not started: nothing can be published yet');
    return this.sender;
  }

  /** Whether the delivery's partition is still this worker's, in the assignment that delivered it. */
  private holds(entry: HeldDelivery): boolean {
    return this.partitions.get(tpKey(entry.source.topic, entry.source.partition)) === entry.part;
  }

  private liftBounds(parts: ReadonlySet<HeldPartition>): void {
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

  /**
   * Consumer in contact and in its group, and results getting out whenever there are results to
   * send (see ProducerWatch). A consumer kafkajs left outside its group still has its fetches
   * answered (in contact) but reads and commits nothing: unready from the suspicion until it has
   * joined again (LostMemberRestarter.outsideGroup).
   */
  connected(): boolean {
    return (
      !this.closed &&
      this.watch?.inContact(this.contactWindowMs) === true &&
      this.sender?.delivering() !== false &&
      this.restarter?.outsideGroup() === undefined
    );
  }

  unreadyReason(): string | undefined {
    if (this.closed) return undefined;
    const outside = this.restarter?.outsideGroup();
    if (outside === undefined) return undefined;
    const what = { suspected: 'restarting it', restarting: 'restarting it', rejoining: 'restarted, rejoining' }[outside.phase];
    return `kafka request consumer outside its group since ${new Date(outside.lastMemberAt).toISOString()} (fetches answered, no heartbeat), ${what}`;
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
    this.restarter?.stop();
    await Promise.allSettled([this.consumer?.disconnect(), this.sender?.disconnect(), this.admin?.disconnect()]);
  }

  async sourceLag(): Promise<Record<string, number>> {
    if (this.admin === undefined) return {};
    return consumerLag(this.admin, this.settings.groupId, new Map([...this.sources].map(([topic, s]) => [topic, s.model])));
  }
}
