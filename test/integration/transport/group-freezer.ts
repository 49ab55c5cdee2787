// A worker whose process stalled, as its consumer group sees it, made on the wire: once frozen,
// the group requests its connections carry (heartbeats, joins, syncs, leaves) never reach the broker
// and are never answered, so the group evicts the member when its session runs out while the member
// itself learns nothing of it. Its other requests (fetches, the transactional producer's) still go,
// as they would from a process that resumed before its consumer's next heartbeat. A busy loop
// cannot stand in: it would freeze the other worker of the test's process too.
import type { Kafka } from 'kafkajs';
import { sleep } from './conformance-kit.ts';
import { requestSniffingFactory } from './produce-sniffer.ts';

/** Kafka's api keys of JoinGroup, Heartbeat, LeaveGroup and SyncGroup. */
const GROUP_API_KEYS = new Set([11, 12, 13, 14]);

export class GroupFreezer {
  private frozen = false;
  /** Group requests swallowed while frozen. */
  swallowed = 0;
  readonly socketFactory;

  constructor() {
    this.socketFactory = requestSniffingFactory(
      'GroupFreezer',
      (request) => GROUP_API_KEYS.has(request.readInt16BE(4)),
      (_socket, group, forward) => {
        if (!group || !this.frozen) return forward();
        this.swallowed++;
        return true;
      },
    );
  }

  freeze(): void {
    this.frozen = true;
  }

  thaw(): void {
    this.frozen = false;
  }
}

/** Until the broker has no member in `groupId` (a frozen one evicted when its session ran out). */
export async function untilEmpty(kafka: Kafka, groupId: string, timeoutMs: number): Promise<void> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    for (const until = Date.now() + timeoutMs; ; await sleep(200)) {
      const { groups } = await admin.describeGroups([groupId]);
      if ((groups[0]?.members.length ?? 0) === 0) return;
      if (Date.now() > until) throw new Error(`group ${groupId} still has ${groups[0]?.members.length} member(s) after ${timeoutMs} ms`);
    }
  } finally {
    await admin.disconnect();
  }
}
