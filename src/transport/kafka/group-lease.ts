import type { Consumer } from 'kafkajs';
import type { MembershipLease } from './kafka-eos.ts';

/**
 * How long after the send of the group request the coordinator last answered in its favour a
 * member still counts as holding its partitions: half its session. The coordinator takes that
 * request after it was sent and keeps the member for a session from then, so for at least the
 * other half nobody else can have been given its partitions by a session running out.
 */
const LEASE_SHARE_OF_SESSION = 0.5;

/**
 * A consumer's hold on its group membership, as its own heartbeats tell it, for the exactly-once
 * committer: a worker whose process stalled past its session was evicted without knowing it (it
 * learns at its next heartbeat), and kafkajs's TxnOffsetCommit carries no member id or generation
 * (KIP-447), so the broker would take its transaction's offsets, and its results, for partitions
 * another worker already answers. It must not commit unless a heartbeat (or a join) it sent less
 * than half a session ago was answered. Free: no request of its own, only kafkajs's events
 * (a request's send time, then HEARTBEAT / GROUP_JOIN once answered without error). JS thread only.
 */
export class GroupLease implements MembershipLease {
  private heartbeatSentAt = 0;
  private syncSentAt = 0;
  /** Send time of the last group request answered in the member's favour; 0: none yet. */
  private confirmedSentAt = 0;
  readonly leaseMs: number;

  /** `renewalWaitMs`: a little over a heartbeat interval, so a healthy consumer's next heartbeat comes within it. */
  constructor(sessionTimeoutMs: number, readonly renewalWaitMs: number) {
    this.leaseMs = Math.floor(sessionTimeoutMs * LEASE_SHARE_OF_SESSION);
  }

  /** Listens to `consumer`'s instrumentation events (it keeps them across kafkajs restarts). */
  watch(consumer: Consumer): void {
    consumer.on(consumer.events.REQUEST, (e) => this.onRequest(e.payload.apiName, e.payload.sentAt));
    consumer.on(consumer.events.HEARTBEAT, () => this.onHeartbeat());
    consumer.on(consumer.events.GROUP_JOIN, () => this.onJoin());
  }

  /** Any request's answer came (kafkajs emits it before it reads the answer's error code). */
  onRequest(apiName: string, sentAt: number): void {
    if (apiName === 'Heartbeat') this.heartbeatSentAt = sentAt;
    else if (apiName === 'SyncGroup') this.syncSentAt = sentAt;
  }

  /** A heartbeat was answered without error: the one whose answer came last (kafkajs sends one at a time). */
  onHeartbeat(): void {
    this.confirmedSentAt = Math.max(this.confirmedSentAt, this.heartbeatSentAt);
  }

  /** Joined (JoinGroup and SyncGroup answered): the session runs from the SyncGroup at the latest. */
  onJoin(): void {
    this.confirmedSentAt = Math.max(this.confirmedSentAt, this.syncSentAt);
  }

  /** Whether the group cannot have given this member's partitions away yet. */
  held(nowMs = Date.now()): boolean {
    return this.confirmedSentAt > 0 && nowMs - this.confirmedSentAt < this.leaseMs;
  }
}
