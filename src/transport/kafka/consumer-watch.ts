import type { Kafka } from 'kafkajs';
import type { KafkaSettings } from '../../contracts/fleet-config.ts';
import type { FleetError } from '../../errors/fleet-error.ts';
import { consumerFailure, ensureTopics, isUnknownTopic, type TransportLogger } from './kafka-client.ts';
import { isCoordinatorNotFound } from './lost-member-watch.ts';

/** How long start() waits for the worker's first group join before it carries on anyway. */
export const JOIN_WAIT_MS = 30_000;

export interface ConsumerWatchOptions {
  readonly kafka: Kafka;
  readonly settings: KafkaSettings;
  /** The request topics the consumer reads (created again if one is deleted). */
  readonly requestTopics: () => readonly string[];
  readonly partitions: number;
  readonly logger?: TransportLogger | undefined;
  readonly isClosed: () => boolean;
  /** The consumer is gone for good after start(): the worker must drain and exit. */
  readonly onFatal: (err: FleetError) => void;
}

/**
 * What KafkaTransport watches of its kafkajs consumer besides the messages, on the JS thread:
 * - start() resolves once the worker is in its group (or after JOIN_WAIT_MS), so a consumer the
 *   brokers refuse (a session timeout outside their range, a group it may not use) fails the
 *   start with the setting to fix, instead of leaving a worker that looks ready and reads nothing;
 * - a crash kafkajs will not restart is fatal for a running worker;
 * - a request topic deleted under a running worker is created again: every kafkajs restart would
 *   fail on it, and the consumer would serve none of its other topics.
 */
export class ConsumerWatch {
  private refuseStart: ((err: FleetError) => void) | undefined;
  private joined: () => void = () => undefined;
  private firstJoin: Promise<void> | undefined;
  private fatalReported = false;
  private restoring: Promise<void> | undefined;
  private lastContactAt = 0;

  constructor(private readonly o: ConsumerWatchOptions) {}

  /** A heartbeat, fetch, commit or join the broker answered. */
  onContact(nowMs = Date.now()): void {
    this.lastContactAt = nowMs;
  }

  /**
   * Whether the broker answered within `windowMs`. kafkajs heartbeats every heartbeatInterval
   * even while every partition is paused, so silence for a few intervals means the coordinator
   * is unreachable (frozen, partitioned away) or the group is in a long rebalance: either way
   * this worker reads nothing now.
   */
  inContact(windowMs: number, nowMs = Date.now()): boolean {
    return this.lastContactAt > 0 && nowMs - this.lastContactAt <= windowMs;
  }

  /** Before consumer.run(): from now on a refusal fails untilJoined() instead of being fatal. */
  armStart(): void {
    this.firstJoin = new Promise<void>((resolve, reject) => {
      this.joined = resolve;
      this.refuseStart = reject;
    });
  }

  /** On every GROUP_JOIN. */
  onJoin(): void {
    this.onContact();
    this.joined();
  }

  /** After consumer.run(): the first join, a refusal (rejects), or JOIN_WAIT_MS of a slow rebalance. */
  async untilJoined(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<'waited'>((resolve) => (timer = setTimeout(() => resolve('waited'), JOIN_WAIT_MS)));
    try {
      if ((await Promise.race([this.firstJoin, waited])) === 'waited') {
        // Other members finishing long batches is no reason to fail: the assignment comes with the join.
        this.o.logger?.warn({ groupId: this.o.settings.groupId, waitedMs: JOIN_WAIT_MS }, 'not in the kafka consumer group yet; starting anyway');
      }
    } finally {
      clearTimeout(timer);
      this.refuseStart = undefined;
    }
  }

  /** On every CRASH: kafkajs restarts the consumer after a retriable failure (a broker outage) by itself. */
  onCrash(error: Error, restart: boolean): void {
    if (restart) {
      this.o.logger?.warn({ err: error }, 'kafka consumer failed; kafkajs restarts it');
      if (isUnknownTopic(error)) this.restoreRequestTopics();
      return;
    }
    if (this.o.isClosed() || this.fatalReported) return;
    // Passing, not the worker's settings: LostMemberRestarter runs the consumer again (once started).
    if (this.refuseStart === undefined && isCoordinatorNotFound(error)) return;
    this.fatalReported = true;
    const err = consumerFailure(error, this.o.settings);
    if (this.refuseStart !== undefined) {
      this.refuseStart(err);
      return;
    }
    this.o.logger?.error({ err }, 'kafka consumer stopped for good');
    this.o.onFatal(err);
  }

  private restoreRequestTopics(): void {
    if (this.restoring !== undefined || this.o.isClosed()) return;
    // A fresh admin: a kafkajs client that knew the deleted topic keeps asking for its metadata
    // and fails (tulios/kafkajs#1622), the transport's long-lived admin included.
    const admin = this.o.kafka.admin();
    const topics = [...this.o.requestTopics()];
    this.restoring = admin
      .connect()
      .then(() => ensureTopics(admin, topics, this.o.partitions))
      .then(() => this.o.logger?.warn({ topics }, 'a request topic was deleted while this worker read it; created it again'))
      .catch((err: unknown) => this.o.logger?.error({ err }, 'could not create a deleted request topic again'))
      .finally(() => {
        this.restoring = undefined;
        void admin.disconnect().catch(() => undefined);
      });
  }
}
