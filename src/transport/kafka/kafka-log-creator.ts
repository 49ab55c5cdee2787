import { logLevel, type logCreator } from 'kafkajs';
import type { TransportLogger } from './kafka-client.ts';

/**
 * Broker answers kafkajs recovers from by itself. Its connection layer still logs each one at
 * ERROR: while a group rebalances (every worker start, stop or crash) a busy consumer retries its
 * heartbeat after each fetched batch and logs dozens of "Response Heartbeat" errors before the
 * rejoin, which kafkajs then reports once at WARN; a transactional producer that adds partitions
 * right after a commit is told to retry. Those per-request lines go to debug.
 */
const RECOVERED_BY_KAFKAJS = new Set([
  'The group is rebalancing, so a rejoin is needed',
  // After a broker outage longer than the session: every heartbeat until the rejoin says so.
  'The coordinator is not aware of this member',
  'The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing',
]);

/**
 * Broker answers of a cluster in motion: partition leadership moving (a topic just created, a
 * broker restarting) or a group coordinator not yet in place (a fresh broker, a coordinator
 * moving). kafkajs refreshes metadata and retries; if that keeps failing the error reaches the
 * transport, which reports it. A fleet start meets them every time (a start creating the request
 * topics of 3 models logged 18-28 "not the leader" warnings, one per partition), so each answer
 * is transient (TRANSIENT_GRACE_MS).
 */
const CLUSTER_IN_MOTION = [
  'This server is not the leader for that topic-partition',
  'There is no leader for this topic-partition as we are in the middle of a leadership election',
  'This server does not host this topic-partition',
  'The leader epoch in the request is older than the epoch on the broker',
  'The leader epoch in the request is newer than the epoch on the broker',
  "The coordinator is loading and hence can't process requests for this group",
  'The group coordinator is not available',
  'This is not the correct coordinator for this group',
];

/**
 * A connection kafkajs failed to make or lost for a network reason, which it retries (a broker
 * restarting, or not there at all). TLS and SASL failures are not among them: the same attempt
 * fails the same way, so they stay errors. The match is the condition's key: the seed-broker line
 * kafkajs logs next to each "Connection error" counts with it.
 */
const CONNECTION_LOST = /Connection error: .*\b(?:ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|EPIPE|ENOTFOUND|EAI_AGAIN)\b.*|Connection timeout|Closed connection/;

/** kafkajs's WARN once per rejoin of its consumer: every rebalance (a worker starting or stopping) has one. */
const REJOINING = 'The group is rebalancing, re-joining';

/**
 * Broker answers whose caller judges each part and reports what is really wrong: kafkajs logs a
 * CreateTopics answer holding any per-topic error at ERROR, TOPIC_ALREADY_EXISTS too, and since
 * reply topics are created without a listing first (b6bf140) every existing reply topic a worker
 * met for the first time wrote an ERROR line. ensureTopics takes that answer as success and throws
 * a FleetError naming the topic for any other, which its caller logs.
 */
const JUDGED_BY_CALLER = new Set(['Topic creation errors']);

/**
 * What kafkajs says of a result send the transport gave up (its results went again on a fresh
 * producer): its partitioner throws this at kafkajs's next attempt, so the retries stop. The
 * transport did it on purpose; kafkajs logs it as a failed send.
 */
export const SEND_GIVEN_UP = 'result send given up: its results went again on a fresh producer';

/**
 * kafkajs lines that are said at WARN/ERROR but are the transport's own choice (the start of the
 * message): an idempotent producer with bounded retries "may invalidate EoS guarantees" because
 * its sequence numbers are rolled back when a send fails, and a producer that failed a send is
 * never used again (ResultSender, KafkaProducer); a given-up send (SEND_GIVEN_UP).
 */
const CHOSEN_BY_CALLER = ['Limiting retries for the idempotent producer', SEND_GIVEN_UP];

/**
 * How long a transient condition (CLUSTER_IN_MOTION, CONNECTION_LOST, REJOINING) may go on before
 * it is a warning, and then the least time between two warnings of it. kafkajs's retries of one
 * request back off up to 5 s, so a condition that recovers is quiet again well within it; one that
 * is not (a broker down, a topic whose leader never comes, a group rebalancing again and again)
 * shows within it, once per this time with how often it repeated, instead of a line per attempt.
 * A condition quiet for this long starts again from nothing.
 */
export const TRANSIENT_GRACE_MS = 10_000;

/** Conditions tracked per logger; past it those quiet longest are forgotten (a cap on memory, not a limit seen in practice). */
const MAX_CONDITIONS = 64;

interface Streak {
  startedAt: number;
  lastAt: number;
  count: number;
  warnedAt: number;
}

/** The transient conditions one logger has seen, shared by every kafkajs client logging to it. */
class TransientConditions {
  private readonly streaks = new Map<string, Streak>();

  /** Counts one occurrence; returns the streak when it is to be logged as a warning now. */
  note(key: string, nowMs: number): Readonly<Streak> | undefined {
    let streak = this.streaks.get(key);
    if (streak === undefined || nowMs - streak.lastAt > TRANSIENT_GRACE_MS) {
      streak = { startedAt: nowMs, lastAt: nowMs, count: 0, warnedAt: -Infinity };
      this.streaks.delete(key);
      this.forgetQuiet(nowMs);
      this.streaks.set(key, streak);
    }
    streak.count++;
    streak.lastAt = nowMs;
    if (nowMs - streak.startedAt < TRANSIENT_GRACE_MS || nowMs - streak.warnedAt < TRANSIENT_GRACE_MS) return undefined;
    streak.warnedAt = nowMs;
    return streak;
  }

  private forgetQuiet(nowMs: number): void {
    if (this.streaks.size < MAX_CONDITIONS) return;
    for (const [key, streak] of this.streaks) if (nowMs - streak.lastAt > TRANSIENT_GRACE_MS) this.streaks.delete(key);
    // Oldest first (Map order): a new streak is set last.
    for (const key of this.streaks.keys()) {
      if (this.streaks.size < MAX_CONDITIONS) break;
      this.streaks.delete(key);
    }
  }
}

const conditionsOf = new WeakMap<TransportLogger, TransientConditions>();

/**
 * The transient condition an entry reports (its key), if it is one; `cause` is the broker's answer
 * of a "Response" line or the error a retry announcement names. A consumer's crash is not,
 * whatever its cause: the transport acts on it (restarts, or reports a consumer that stopped).
 */
function transientKey(level: logLevel, message: string, cause: string | undefined): string | undefined {
  if (message.startsWith('Crash:') || message.startsWith('Restarting the consumer')) return undefined;
  if (level === logLevel.WARN && message === REJOINING) return message;
  const text = cause ?? message;
  return CLUSTER_IN_MOTION.find((m) => text.includes(m)) ?? CONNECTION_LOST.exec(text)?.[0];
}

/**
 * Maps kafkajs log entries onto the fleet's logger. `nowMs` is the clock of TRANSIENT_GRACE_MS
 * (tests move it).
 */
export function kafkaLogCreator(logger: TransportLogger | undefined, nowMs: () => number = Date.now): logCreator {
  if (logger === undefined) return () => () => undefined;
  let conditions = conditionsOf.get(logger);
  if (conditions === undefined) conditionsOf.set(logger, (conditions = new TransientConditions()));
  const seen = conditions;
  return () =>
    ({ level, log }) => {
      const { message, ...extra } = log;
      const obj = { kafkajs: extra.logger, ...extra };
      const answer = message.startsWith('Response ') && typeof extra['error'] === 'string' ? extra['error'] : undefined;
      const recovered =
        (answer !== undefined && (RECOVERED_BY_KAFKAJS.has(answer) || JUDGED_BY_CALLER.has(answer))) || CHOSEN_BY_CALLER.some((m) => message.startsWith(m));
      if (recovered) return logger.debug(obj, message);
      // An entry with a retryCount announces a retry, not a failure: if the retries run out, the
      // error reaches the transport, which reports it.
      const retrying = typeof extra['retryCount'] === 'number';
      const cause = answer ?? (retrying && typeof extra['error'] === 'string' ? extra['error'] : undefined);
      const transient = level <= logLevel.WARN ? transientKey(level, message, cause) : undefined;
      if (transient !== undefined) {
        const atMs = nowMs();
        const persisting = seen.note(transient, atMs);
        if (persisting === undefined) return message === REJOINING ? logger.info(obj, message) : logger.debug(obj, message);
        const forMs = atMs - persisting.startedAt;
        const text = cause === undefined || message.includes(cause) ? message : `${message}: ${cause}`;
        return logger.warn({ ...obj, repeats: persisting.count, forMs }, `${text} (repeated ${persisting.count} times over ${Math.round(forMs / 1000)} s)`);
      }
      if (level === logLevel.ERROR && !retrying) logger.error(obj, message);
      else if (level === logLevel.ERROR || level === logLevel.WARN) logger.warn(obj, message);
      else if (level === logLevel.INFO) logger.info(obj, message);
      else logger.debug(obj, message);
    };
}
