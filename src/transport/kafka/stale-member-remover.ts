import type { Consumer, Kafka } from 'kafkajs';
import type { TransportLogger } from './kafka-client.ts';
import { removePredecessorMembers, type GroupMember } from './predecessor-members.ts';

/** How long a failed removal is tried again: past the default 30 s session it is moot. */
const RETRY_WINDOW_MS = 60_000;
/** Pause between attempts (each is bounded by REMOVE_TIMEOUT_MS). */
const RETRY_PAUSE_MS = 1_000;

/**
 * Why: after a broker outage kafkajs restarts the consumer as a new group member, and the member it
 * ran before stays in the group until its session times out (kafkajs's leave on the way out could
 * not reach the broker). A coordinator that restarted meanwhile reloads the group with that member
 * and holds the new member's join until the session expires: with the default 30 s sessionTimeoutMs
 * the worker read nothing for 30 s after the broker was back. So once a consumer that kafkajs
 * restarted gets its first broker answer, the member it ran before leaves the group at once
 * (LeaveGroup, as for a dead predecessor process). JS thread only.
 *
 * The first answer can come seconds before the restarted coordinator takes LeaveGroup (it has
 * not loaded the group yet: a failed run's broker answered at :22.9 and loaded the group at :25.0),
 * while kafkajs's own join retries outlast that and then wait out the session. So a removal that
 * failed is tried again until the member is gone, the new member has joined, or RETRY_WINDOW_MS.
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
    void this.removeUntilGone(member).finally(() => {
      this.removing = false;
    });
  }

  /**
   * Why not one attempt: a LeaveGroup refused while the coordinator loads left the member in the
   * group for its whole session (30 s of replies held back). A re-mark by a later crash of the
   * same member is kept: `stale` is cleared only once the member is removed.
   */
  private async removeUntilGone(member: GroupMember): Promise<void> {
    const giveUpAt = Date.now() + RETRY_WINDOW_MS;
    for (;;) {
      const removed = await removePredecessorMembers(this.kafka, [member], this.logger, undefined, "this client's earlier consumer's");
      if (removed > 0) {
        if (this.stale === member) this.stale = undefined;
        return;
      }
      // The new member joined (GROUP_JOIN cleared `stale`; at once once the member is gone), or closed.
      if (this.stale !== member || this.isClosed()) return;
      if (Date.now() >= giveUpAt) {
        this.stale = undefined;
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, RETRY_PAUSE_MS));
      if (this.stale !== member || this.isClosed()) return;
    }
  }
}
