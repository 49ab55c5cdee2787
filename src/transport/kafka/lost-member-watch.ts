import type { Consumer } from 'kafkajs';
import type { TransportLogger } from './kafka-client.ts';

/** How often a running consumer is looked at. */
const CHECK_EVERY_MS = 1_000;
/** First wait before a consumer kafkajs gave up on runs again; doubles up to REVIVE_MAX_MS while it fails. */
const REVIVE_FIRST_MS = 1_000;
const REVIVE_MAX_MS = 10_000;
/** Fetches answered after a heartbeat fell due, none sent: no slow cycle, the loop skips it. */
const FETCHES_WITHOUT_HEARTBEAT = 3;

export interface MembershipSuspicion {
  /** The last heartbeat or join before it: the member was last known in its group then. */
  readonly lastMemberAt: number;
  readonly suspectedAt: number;
}

/** Where a suspected member is on its way back (see LostMemberRestarter.outsideGroup). */
export type OutsideGroup = MembershipSuspicion & { readonly phase: 'suspected' | 'restarting' | 'rejoining' };

/**
 * Why: kafkajs 2.2.4 can fetch on for good as a consumer its group no longer has. On
 * UNKNOWN_MEMBER_ID (a session that expired while the broker was frozen or restarting) its Runner
 * clears the member id and rejoins once; if that join fails (the coordinator still loading the
 * group after the broker's return, a dropped connection) its retry goes back to fetching with no
 * member id, and a heartbeat without a member id is skipped without a word, so nothing makes it
 * rejoin. Offsets no longer commit, and in the e2e freeze drill its fetches brought nothing more
 * (about 1000 of 3000 requests answered, then none for 90 s, the worker running and ready).
 *
 * The sign, from kafkajs's events: its fetch loop asks for a heartbeat after every fetch and sends
 * one whenever heartbeatInterval has passed since the last, so fetches keep being answered well
 * after a heartbeat fell due while no heartbeat (nor a join) is seen. Timestamps only; JS thread.
 */
export class MembershipWatch {
  /** Last heartbeat or group join; 0: not in a group yet. */
  private memberAt = 0;
  private fetchesSinceDue = 0;
  private lastFetchAt = 0;
  private suspected: MembershipSuspicion | undefined;

  /** Fetching without a heartbeat for this long means lost (within the session: the broker dropped it by then anyway). */
  readonly lostAfterMs: number;

  constructor(private readonly heartbeatIntervalMs: number, sessionTimeoutMs: number) {
    this.lostAfterMs = Math.min(sessionTimeoutMs, Math.max(5_000, 3 * heartbeatIntervalMs));
  }

  /** A heartbeat answered or a group joined (also after a restart: the clock starts again). */
  onMember(nowMs = Date.now()): void {
    this.memberAt = nowMs;
    this.fetchesSinceDue = 0;
  }

  /** A group joined (the assignment came with it): what a suspicion waits for. */
  onJoin(nowMs = Date.now()): MembershipSuspicion | undefined {
    const cleared = this.suspected;
    this.suspected = undefined;
    this.onMember(nowMs);
    return cleared;
  }

  /**
   * lost(), held from the first time it is seen until the next join: in between the consumer is
   * out of its group whatever its fetches do (a restart stops them, a failed rejoin may resume
   * them). True the first time only.
   */
  suspect(nowMs = Date.now()): boolean {
    if (this.suspected !== undefined || !this.lost(nowMs)) return false;
    this.suspected = { lastMemberAt: this.memberAt, suspectedAt: nowMs };
    return true;
  }

  get suspicion(): MembershipSuspicion | undefined {
    return this.suspected;
  }

  onFetch(nowMs = Date.now()): void {
    this.lastFetchAt = nowMs;
    if (this.memberAt > 0 && nowMs - this.memberAt > this.heartbeatIntervalMs) this.fetchesSinceDue++;
  }

  /** Still fetching (within the last few fetch cycles), with no heartbeat for lostAfterMs. */
  lost(nowMs = Date.now()): boolean {
    return (
      this.memberAt > 0 &&
      nowMs - this.memberAt > this.lostAfterMs &&
      this.fetchesSinceDue >= FETCHES_WITHOUT_HEARTBEAT &&
      nowMs - this.lastFetchAt <= Math.max(2_000, this.heartbeatIntervalMs)
    );
  }
}

/**
 * kafkajs's KafkaJSGroupCoordinatorNotFound, as a crash carries it (wrapped by its retrier): every
 * broker asked failed to name the group coordinator, each answer swallowed (a connection dropped
 * under the request while the broker shut down). kafkajs classes it as non-retriable and does not
 * restart the consumer, yet it says nothing about the consumer's settings: it passes.
 */
export function isCoordinatorNotFound(error: unknown): boolean {
  for (let e = error, depth = 0; typeof e === 'object' && e !== null && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    const { name, message } = e as { name?: unknown; message?: unknown };
    if (name === 'KafkaJSGroupCoordinatorNotFound' || message === 'Failed to find group coordinator') return true;
  }
  return false;
}

export interface LostMemberRestarterOptions {
  readonly heartbeatIntervalMs: number;
  readonly sessionTimeoutMs: number;
  /** Whose consumer, for the log (the request consumer, a reply subscription on a topic). */
  readonly what: string;
  readonly logger?: TransportLogger | undefined;
  readonly isClosed: () => boolean;
  /** consumer.run() again, with the arguments of the first run (after stop(); the subscription stays). */
  readonly rerun: () => Promise<void>;
}

/**
 * Restarts a kafkajs consumer that MembershipWatch finds fetching outside its group: stop() (its
 * fetch loop ends; the LeaveGroup is skipped, there is no member id), then run() as at the start,
 * which joins the group under a new member id, as kafkajs's own restart after a crash does. And
 * runs again one that kafkajs gave up on for a coordinator it could not find (see
 * isCoordinatorNotFound): connect() and run() after REVIVE_FIRST_MS, then backing off while that fails.
 */
export class LostMemberRestarter {
  private readonly membership: MembershipWatch;
  private timer: NodeJS.Timeout | undefined;
  private restarting = false;
  /** The suspicion the last restart was for: still held after it, kafkajs is retrying the join. */
  private restartedFor: MembershipSuspicion | undefined;
  private reviveTimer: NodeJS.Timeout | undefined;
  private reviveWaitMs = REVIVE_FIRST_MS;

  constructor(
    private readonly consumer: Consumer,
    private readonly o: LostMemberRestarterOptions,
  ) {
    this.membership = new MembershipWatch(o.heartbeatIntervalMs, o.sessionTimeoutMs);
    const member = (): void => this.membership.onMember();
    consumer.on(consumer.events.HEARTBEAT, member);
    consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
      const cleared = this.membership.onJoin();
      this.reviveWaitMs = REVIVE_FIRST_MS;
      if (cleared !== undefined) {
        const partitions = Object.values(payload.memberAssignment).reduce((n, parts) => n + parts.length, 0);
        this.o.logger?.info(
          { memberId: payload.memberId, partitions, outsideGroupMs: Date.now() - cleared.lastMemberAt },
          `the kafka consumer of ${this.o.what} joined its group again (${partitions} partitions assigned), ${Date.now() - cleared.suspectedAt} ms after it was found outside it`,
        );
      }
    });
    consumer.on(consumer.events.FETCH, () => this.membership.onFetch());
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      if (!payload.restart && isCoordinatorNotFound(payload.error)) this.reviveLater();
    });
  }

  /** After the first consumer.run(). */
  start(): void {
    if (this.timer !== undefined) return;
    // Not ended by the consumer's DISCONNECT: kafkajs disconnects on each crash before it restarts.
    this.timer = setInterval(() => {
      if (this.o.isClosed()) this.stop();
      else if (!this.restarting && this.membership.lost()) {
        this.membership.suspect();
        void this.restart();
      }
    }, CHECK_EVERY_MS);
    this.timer.unref();
  }

  /**
   * Out of its group as far as the watch can tell, from the moment lost() holds (seen here, not
   * only at the next check) through the restart until the consumer has joined again with its
   * assignment; undefined otherwise. A rebalance is no suspicion: no fetches while it rejoins.
   * For readiness: the consumer's fetches are answered all along, so its contact never lapses.
   */
  outsideGroup(nowMs = Date.now()): OutsideGroup | undefined {
    if (this.timer === undefined || this.o.isClosed()) return undefined;
    this.membership.suspect(nowMs);
    const s = this.membership.suspicion;
    if (s === undefined) return undefined;
    return { ...s, phase: this.restarting ? 'restarting' : this.restartedFor === s ? 'rejoining' : 'suspected' };
  }

  /** Ends the checks and a pending revival: the owner closes the consumer (the checks also end by themselves once isClosed()). */
  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    clearTimeout(this.reviveTimer);
    this.reviveTimer = undefined;
  }

  private reviveLater(): void {
    if (this.reviveTimer !== undefined || this.o.isClosed()) return;
    const waitMs = this.reviveWaitMs;
    this.reviveWaitMs = Math.min(REVIVE_MAX_MS, 2 * waitMs);
    this.o.logger?.warn({ waitMs }, `kafkajs gave up the kafka consumer of ${this.o.what}: no broker named its group coordinator (a broker shutting down); running it again in ${waitMs} ms`);
    // Not unref'd: like kafkajs's own restart timer, a revival to come keeps the process alive.
    this.reviveTimer = setTimeout(() => void this.revive(), waitMs);
  }

  private async revive(): Promise<void> {
    this.reviveTimer = undefined;
    if (this.o.isClosed()) return;
    try {
      await this.consumer.connect();
      if (this.o.isClosed()) return;
      await this.o.rerun();
      this.membership.onMember();
    } catch (err) {
      // A broker still away: try again later. A join that fails crashes the consumer again, and
      // that crash (restarted by kafkajs, or given up for the same reason) takes it from there.
      this.o.logger?.warn({ err }, `running the kafka consumer of ${this.o.what} again failed`);
      this.reviveLater();
    }
  }

  private async restart(): Promise<void> {
    this.restarting = true;
    this.restartedFor = this.membership.suspicion;
    const since = new Date(this.restartedFor?.lastMemberAt ?? Date.now()).toISOString();
    this.o.logger?.warn(
      { lostAfterMs: this.membership.lostAfterMs, outsideGroupSince: since },
      `the kafka consumer of ${this.o.what} fetches but has sent no heartbeat for ${this.membership.lostAfterMs} ms: outside its group since ${since} ` +
        '(kafkajs lost its group member id on a failed rejoin and would never rejoin: it would read nothing more and commit nothing); restarting it',
    );
    try {
      await this.consumer.stop();
      if (this.o.isClosed()) return;
      await this.o.rerun();
    } catch (err) {
      // A run() that cannot join crashes the consumer, and kafkajs restarts it by itself.
      this.o.logger?.error({ err }, `restarting the kafka consumer of ${this.o.what} failed`);
    } finally {
      this.membership.onMember();
      this.restarting = false;
    }
  }
}
