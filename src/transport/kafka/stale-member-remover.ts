import type { Consumer, Kafka } from 'kafkajs';
import type { TransportLogger } from './kafka-client.ts';
import { removePredecessorMembers, type GroupMember } from './predecessor-members.ts';

/**
 * Why: after a broker outage kafkajs restarts the consumer as a new group member, and the member it
 * ran before stays in the group until its session times out (kafkajs's leave on the way out could
 * not reach the broker). A coordinator that restarted meanwhile reloads the group with that member
 * and holds the new member's join until the session expires: with the default 30 s sessionTimeoutMs
 * the worker read nothing for 30 s after the broker was back. So once a consumer that kafkajs
 * restarted gets its first broker answer, the member it ran before leaves the group at once
 * (LeaveGroup, as for a dead predecessor process). JS thread only.
 */
export class StaleMemberRemover {
  private current: GroupMember | undefined;
  private stale: GroupMember | undefined;
  private removing = false;

  constructor(
    private readonly kafka: Kafka,
    private readonly logger: TransportLogger | undefined,
    private readonly isClosed: () => boolean,
  ) {}

  watch(consumer: Consumer): void {
    consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
      this.current = { groupId: payload.groupId, memberId: payload.memberId };
      this.stale = undefined;
    });
    // Also a crash kafkajs does not restart: LostMemberRestarter may run the consumer again.
    consumer.on(consumer.events.CRASH, () => {
      if (this.current !== undefined) this.stale = this.current;
    });
    // Emitted for each answer the broker gives (none while it is away): the first one after the
    // restart is the moment the LeaveGroup can get through.
    consumer.on(consumer.events.REQUEST, () => this.onAnswer());
  }

  private onAnswer(): void {
    const member = this.stale;
    if (member === undefined || this.removing || this.isClosed()) return;
    this.removing = true;
    // One attempt: if it fails the session timeout removes the member, as before.
    void removePredecessorMembers(this.kafka, [member], this.logger, undefined, "this client's earlier consumer's").finally(() => {
      this.removing = false;
      if (this.stale === member) this.stale = undefined;
    });
  }
}
