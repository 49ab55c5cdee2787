import type { Kafka } from 'kafkajs';
import { withTimeout } from '../with-timeout.ts';
import type { TransportLogger } from './kafka-client.ts';

/** A consumer-group member this transport ran (kafkajs GROUP_JOIN payload). */
export interface GroupMember {
  readonly groupId: string;
  readonly memberId: string;
}

/** How long start() waits for the dead predecessor's members to be removed before joining anyway. */
export const REMOVE_TIMEOUT_MS = 5_000;
const ATTEMPTS = 3;

/**
 * The note for the next worker process of this device: the group member of each consumer it runs,
 * and (exactly-once) the transactional id of its result producer, which the next worker fences.
 */
export function predecessorMembersNote(members: readonly GroupMember[], transactionalId?: string): string {
  return JSON.stringify({ kafkaMembers: members.map(({ groupId, memberId }) => ({ groupId, memberId })), ...(transactionalId === undefined ? {} : { transactionalId }) });
}

/** The transactional id a previous worker process noted (see predecessorMembersNote); undefined for any other note. */
export function predecessorTransactionalId(note: string | undefined): string | undefined {
  if (note === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(note);
  } catch {
    return undefined;
  }
  const id = typeof parsed === 'object' && parsed !== null ? (parsed as { transactionalId?: unknown }).transactionalId : undefined;
  return typeof id === 'string' && id !== '' ? id : undefined;
}

/**
 * The members a previous worker process noted (see predecessorMembersNote). Anything else (a
 * BullMQ note, an older or torn note, garbage) yields none: nothing is removed on a guess.
 */
export function predecessorMembers(note: string | undefined): GroupMember[] {
  if (note === undefined) return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(note);
  } catch {
    return [];
  }
  const list = typeof parsed === 'object' && parsed !== null ? (parsed as { kafkaMembers?: unknown }).kafkaMembers : undefined;
  if (!Array.isArray(list)) return [];
  const out: GroupMember[] = [];
  for (const m of list as unknown[]) {
    if (typeof m !== 'object' || m === null) continue;
    const { groupId, memberId } = m as { groupId?: unknown; memberId?: unknown };
    if (typeof groupId !== 'string' || groupId === '' || typeof memberId !== 'string' || memberId === '') continue;
    if (!out.some((o) => o.groupId === groupId && o.memberId === memberId)) out.push({ groupId, memberId });
  }
  return out;
}

/** The parts of kafkajs's internal Cluster and Broker (2.2.x) used here. */
interface InternalCluster {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  findGroupCoordinator(o: { groupId: string }): Promise<{ leaveGroup(o: { groupId: string; memberId: string }): Promise<unknown> }>;
}

/**
 * kafkajs has no public call that removes another member from a group. Its Kafka client keeps a
 * private cluster factory (the one behind admin(), producer() and consumer()); a cluster made by
 * it has the client's brokers, TLS, SASL, socket factory, retry and logger, so the LeaveGroup
 * below goes out exactly as the consumer's own would: FindCoordinator first, then LeaveGroup at
 * the highest version both kafkajs and the broker support (kafkajs negotiates it from ApiVersions;
 * v3 against Kafka 4.x, which dropped the oldest versions). Preferred over a raw request over
 * net/tls, which would have to redo TLS, every SASL mechanism and the version negotiation; and
 * over deep imports of kafkajs/src, which would have to rebuild the client's options. Undefined
 * when a kafkajs upgrade moved it: the caller then falls back to waiting out the session timeout.
 */
function internalCluster(kafka: Kafka): InternalCluster | undefined {
  const key = Object.getOwnPropertySymbols(kafka).find((s) => s.description === 'private:Kafka:createCluster');
  const create = key === undefined ? undefined : (kafka as unknown as Record<symbol, unknown>)[key];
  if (typeof create !== 'function') return undefined;
  const cluster = (create as (o: object) => unknown)({ allowAutoTopicCreation: false }) as Partial<InternalCluster> | undefined;
  if (typeof cluster?.connect !== 'function' || typeof cluster.findGroupCoordinator !== 'function' || typeof cluster.disconnect !== 'function') return undefined;
  return cluster as InternalCluster;
}

type KafkaErrorLike = { type?: string; retriable?: boolean; message?: string };

/**
 * Removes the members a dead previous worker process of this device left in their groups (from
 * its note: openPredecessorNote hands the note over only once its writer is dead), so that the
 * coordinator rebalances now instead of after `sessionTimeoutMs` with no heartbeat, during which
 * the dead member's partitions are served by nobody and the new worker's join waits for it.
 * Never throws: a member already gone (UNKNOWN_MEMBER_ID: it left cleanly, or its session
 * lapsed), a refusal (authorization) or a coordinator out of reach is logged, and the group then
 * expires the member by itself as before. Bounded by REMOVE_TIMEOUT_MS. Returns how many it removed.
 */
export async function removePredecessorMembers(
  kafka: Kafka,
  members: readonly GroupMember[],
  logger: TransportLogger | undefined,
  timeoutMs = REMOVE_TIMEOUT_MS,
  /** Whose members these are, for the log lines. */
  whose = "the dead previous worker's",
): Promise<number> {
  if (members.length === 0) return 0;
  const cluster = internalCluster(kafka);
  if (cluster === undefined) {
    logger?.warn({ members }, `this kafkajs offers no way to remove ${whose} group members; its partitions wait for its session to time out`);
    return 0;
  }
  let removed = 0;
  const work = (async () => {
    await cluster.connect();
    for (const { groupId, memberId } of members) {
      if (await leave(cluster, groupId, memberId, logger, whose)) removed++;
    }
  })();
  try {
    await withTimeout(work, timeoutMs, `removing ${whose} group members`);
  } catch (err) {
    logger?.warn({ err, members }, `could not remove ${whose} group members; its partitions wait for its session to time out`);
  } finally {
    // After a timeout the attempt goes on in the background: its connections close when it ends.
    void work.catch(() => undefined).finally(() => cluster.disconnect().catch(() => undefined));
  }
  return removed;
}

async function leave(cluster: InternalCluster, groupId: string, memberId: string, logger: TransportLogger | undefined, whose: string): Promise<boolean> {
  for (let attempt = 1; ; attempt++) {
    try {
      // The coordinator is looked up again on each attempt: NOT_COORDINATOR means it moved.
      const coordinator = await cluster.findGroupCoordinator({ groupId });
      await coordinator.leaveGroup({ groupId, memberId });
      logger?.info({ groupId, memberId }, `removed ${whose} member from its consumer group: its partitions are reassigned now, not after its session timeout`);
      return true;
    } catch (e) {
      const err = e as KafkaErrorLike;
      if (err.type === 'UNKNOWN_MEMBER_ID') {
        logger?.info({ groupId, memberId }, `${whose} member is no longer in its consumer group (it left, or its session timed out)`);
        return false;
      }
      if (err.retriable === true && attempt < ATTEMPTS) {
        await new Promise((resolve) => setTimeout(resolve, 200 * attempt));
        continue;
      }
      logger?.warn({ err, groupId, memberId }, `could not remove ${whose} member from its consumer group; its partitions wait for its session to time out`);
      return false;
    }
  }
}

/** How long start() waits for the dead predecessor's transaction to be fenced before going on anyway. */
export const FENCE_TIMEOUT_MS = 10_000;

/**
 * Exactly-once: fences the transactional id a dead previous worker process of this device noted
 * (see predecessorMembersNote). A worker SIGKILLed mid-transaction leaves it open, and
 * read_committed readers of every partition it wrote (client inboxes, {model}.replies, with the
 * other workers' results there) stop at its first record until the coordinator aborts it after
 * `transactionTimeoutMs`. Initialising a producer of that id makes the coordinator abort it now.
 * Only an id of this client and group (`<clientId>.<groupId>.`) is fenced. Never throws: a
 * refusal (authorization) or a coordinator out of reach is logged, and the transaction then ends at
 * its timeout as before. Bounded by FENCE_TIMEOUT_MS. Returns whether it fenced.
 */
export async function fencePredecessorTransaction(
  kafka: Kafka,
  transactionalId: string | undefined,
  o: { readonly clientId: string; readonly groupId: string; readonly transactionTimeoutMs: number },
  logger: TransportLogger | undefined,
  timeoutMs = FENCE_TIMEOUT_MS,
): Promise<boolean> {
  if (transactionalId === undefined || !transactionalId.startsWith(`${o.clientId}.${o.groupId}.`)) return false;
  const producer = kafka.producer({ transactionalId, transactionTimeout: o.transactionTimeoutMs, idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
  const work = (async () => {
    await producer.connect();
    // Its InitProducerId bumps the id's epoch: the coordinator aborts the dead one's open transaction.
    const tx = await producer.transaction();
    await tx.abort();
  })();
  try {
    await withTimeout(work, timeoutMs, "fencing the dead previous worker's transactional id");
    logger?.info({ transactionalId }, "fenced the dead previous worker's transactional id: a transaction it left open is aborted now, not after transactionTimeoutMs");
    return true;
  } catch (err) {
    logger?.warn({ err, transactionalId }, "could not fence the dead previous worker's transactional id; a transaction it left open holds back read_committed readers until transactionTimeoutMs");
    return false;
  } finally {
    void work.catch(() => undefined).finally(() => producer.disconnect().catch(() => undefined));
  }
}
