import type { Consumer, EachBatchPayload, Kafka } from 'kafkajs';
import type { KafkaSettings } from '../../contracts/fleet-config.ts';
import type { FleetError } from '../../errors/fleet-error.ts';
import { ConsumerWatch } from './consumer-watch.ts';
import { whileTopicMetadataLags, type TransportLogger } from './kafka-client.ts';
import { LostMemberRestarter } from './lost-member-watch.ts';

export interface RequestConsumerOptions {
  readonly kafka: Kafka;
  readonly settings: KafkaSettings;
  readonly requestTopics: () => readonly string[];
  /** Partitions of a request topic created again after it was deleted. */
  readonly partitions: number;
  readonly maxWaitTimeMs: number;
  readonly maxBytesPerPartition: number;
  readonly logger?: TransportLogger | undefined;
  readonly isClosed: () => boolean;
  /** Intake stopped for good (drain): a lost member is not restarted any more. */
  readonly intakeStopped: () => boolean;
  readonly onFatal: (err: FleetError) => void;
  /** The consumer learnt the group is rebalancing and is about to rejoin (its assignment still stands until onJoin). */
  readonly onRebalancing: () => void;
  /** On every group join (also a rejoin under a new member id). */
  readonly onJoin: (join: { groupId: string; memberId: string; memberAssignment: Record<string, number[]> }) => void;
  readonly eachBatch: (payload: EachBatchPayload) => Promise<void>;
}

/**
 * How long without a heartbeat, fetch or commit answered means the brokers are unreachable: three
 * missed heartbeats (at least 5 s), not a slow answer. The result producer gets the same window.
 */
export function contactWindowFor(settings: Pick<KafkaSettings, 'sessionTimeoutMs'>): { heartbeatIntervalMs: number; contactWindowMs: number } {
  const heartbeatIntervalMs = Math.max(100, Math.min(3_000, Math.floor(settings.sessionTimeoutMs / 5)));
  return { heartbeatIntervalMs, contactWindowMs: Math.max(5_000, 3 * heartbeatIntervalMs) };
}

/**
 * The transport's one consumer-group member and its ConsumerWatch, wired together: autoCommit off
 * (the transport commits settled prefixes), no topic auto-creation, every answered heartbeat,
 * fetch and commit counted as contact.
 */
export class RequestConsumer {
  readonly consumer: Consumer;
  readonly watch: ConsumerWatch;
  readonly restarter: LostMemberRestarter;

  constructor(private readonly o: RequestConsumerOptions) {
    const { heartbeatIntervalMs } = contactWindowFor(o.settings);
    const consumer = o.kafka.consumer({
      groupId: o.settings.groupId,
      sessionTimeout: o.settings.sessionTimeoutMs,
      heartbeatInterval: heartbeatIntervalMs,
      maxWaitTimeInMs: o.maxWaitTimeMs,
      maxBytesPerPartition: o.maxBytesPerPartition,
      allowAutoTopicCreation: false,
      readUncommitted: false,
    });
    const watch = new ConsumerWatch({
      kafka: o.kafka,
      settings: o.settings,
      requestTopics: o.requestTopics,
      partitions: o.partitions,
      logger: o.logger,
      isClosed: o.isClosed,
      onFatal: o.onFatal,
    });
    watch.armStart();
    const contact = (): void => watch.onContact();
    for (const event of [consumer.events.HEARTBEAT, consumer.events.FETCH, consumer.events.COMMIT_OFFSETS]) consumer.on(event, contact);
    consumer.on(consumer.events.GROUP_JOIN, (e) => {
      o.onJoin(e.payload);
      watch.onJoin();
    });
    consumer.on(consumer.events.REBALANCING, () => o.onRebalancing());
    consumer.on(consumer.events.CRASH, (e) => watch.onCrash(e.payload.error, e.payload.restart));
    this.consumer = consumer;
    this.watch = watch;
    this.restarter = new LostMemberRestarter(consumer, {
      heartbeatIntervalMs,
      sessionTimeoutMs: o.settings.sessionTimeoutMs,
      what: 'the request topics',
      logger: o.logger,
      // Nor while draining: a run() racing close()'s disconnect could leave a consumer running after it.
      isClosed: () => o.isClosed() || o.intakeStopped(),
      rerun: () => this.runConsumer(),
    });
  }

  /** Joins the group and runs; resolves once in the group (see ConsumerWatch.untilJoined). */
  async run(): Promise<void> {
    await this.consumer.connect();
    // A new group starts at the beginning: requests published before the first worker count.
    await whileTopicMetadataLags(() => this.consumer.subscribe({ topics: [...this.o.requestTopics()], fromBeginning: true }));
    await this.runConsumer();
    this.restarter.start();
    await this.watch.untilJoined();
  }

  private runConsumer(): Promise<void> {
    return this.consumer.run({ autoCommit: false, eachBatchAutoResolve: true, partitionsConsumedConcurrently: 1, eachBatch: this.o.eachBatch });
  }
}
