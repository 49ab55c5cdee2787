import { randomUUID } from 'node:crypto';
import { Job, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { BullmqSettings } from '../../contracts/fleet-config.ts';
import { FleetError } from '../../errors/fleet-error.ts';
import { checkQuery, expiredWhy, ListingBuilder, refreshedWhy, replayTarget, ReplayTally, sourcePriority, type DeadLetter, type DeadLetterListing, type DeadLetterQuery, type DeadLetters, type NoReplay, type PurgeOptions, type PurgeReport, type ReplayOptions, type ReplayReport } from '../dead-letters.ts';
import { renderName, replyToProblem } from '../names.ts';
import { bullmqError, ensureRedisAnswers, jobIdFor, KEEP_COMPLETED, KEEP_FAILED, redisConnection, redisWhere, toBullmqPriority } from './bullmq-names.ts';
import { isCommandTimeout } from './redis-connection.ts';
import { STALLED_OUT } from './stall-reaper.ts';

/** Jobs loaded per Redis round trip: each carries its original request, tensors included. */
const PAGE = 50;

/**
 * How long a record's replay claim lasts unless released: far longer than the few round trips
 * one record's replay takes, short enough that a record whose replay died is replayable again soon.
 */
export const REPLAY_CLAIM_TTL_MS = 120_000;
/** Deletes / extends a claim only while it is still this replay's (it may have lapsed and been taken). */
const RELEASE_CLAIM = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";
const RENEW_CLAIM = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0";

/** A replay's claim on one DLQ record. */
interface Claim {
  /** False: another replay holds it. */
  readonly held: boolean;
  /** Extends the claim; false when it lapsed (and may be another replay's now). */
  renew(): Promise<boolean>;
  /** Do not release it: let it lapse. */
  keep(): void;
  release(): Promise<void>;
}

interface DlqJobData {
  readonly reason?: unknown;
  readonly message?: unknown;
  readonly source?: { readonly queue?: unknown; readonly jobId?: unknown };
  readonly priority?: unknown;
  readonly original?: unknown;
}

const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const level = (v: unknown): number | undefined => (typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : undefined);

/**
 * The job name of a request re-sent from the DLQ record `ref` (first-time requests are named
 * `request`; the workers read no job name): a replay stopped between the re-add and the record's
 * removal leaves both, and the next one tells by it that the record was re-sent already.
 */
export function replayJobName(ref: string): string {
  return `request replay-of ${ref}`;
}

/** What replaying one record came to: re-sent (`refreshed`: with a later deadline, why), passed over (re-sent already, why), or why it cannot be. */
type RecordReplay = { readonly resent: true; readonly refreshed?: string | undefined } | { readonly passedOver: string } | { readonly stopped: true } | NoReplay;

/**
 * A model's BullMQ DLQ (see DeadLetters): records are waiting jobs of `{model}.dlq` whose data is
 * `{reason, message, source: {queue, jobId}, priority, original}`. Each list/replay works on the
 * ids waiting when it began (records dead-lettered meanwhile, the replay's own included, wait for
 * the next run; records the TTL sweeper removed meanwhile are passed over). A replayed record's
 * job leaves the DLQ once its request is re-added. `jobId = id` means BullMQ would ignore the
 * re-add while the earlier job of that id is retained: replay removes it first (an earlier request
 * still waiting or running is left alone, and its record skipped). Replies carry the request job's
 * timestamp in their id (answer-jobs.ts), so the new reply cannot collide with the earlier one;
 * an earlier reply with the bare id (written before that) is removed too.
 *
 * Replays may race (two operators, a retried CI job): each record is claimed first, with
 * `SET <dlq job key>:replay-claim <token> NX PX` (REPLAY_CLAIM_TTL_MS), and only the claim's holder
 * re-sends it; the others skip it and say so. The claim is a key of its own and the record is
 * removed from the DLQ only after its request was re-added, then the claim released: so a replay
 * that fails or dies between claim and re-send leaves the record in the DLQ, and once the claim
 * lapses the next replay takes it (nothing lost). One that dies after the re-add but before the
 * removal leaves the record too: its re-added job is named after the record (replayJobName), so a
 * later replay finds it there and only removes the record (a record without a request id, whose
 * job id is random, is sent again: a duplicate, never a loss; as is one whose re-added job BullMQ
 * no longer retains, KEEP_COMPLETED / KEEP_FAILED). The
 * claim is renewed just before the re-add and the record passed over if it had lapsed meanwhile,
 * so a replay slower than the TTL cannot send what another has since claimed. JS thread only.
 */
export class BullmqDeadLetters implements DeadLetters {
  private readonly connection: Redis;
  private readonly queues = new Map<string, Queue>();
  private ready: Promise<void> | undefined;

  constructor(private readonly settings: BullmqSettings) {
    // Not a worker connection: commands fail after a few retries instead of waiting for Redis
    // forever, and after connectTimeoutMs without an answer: a Redis that froze (SIGSTOP, a hung
    // host) keeps the connection open, so no retry ever starts and a list or replay hung for good.
    this.connection = redisConnection(settings, { maxRetriesPerRequest: 3, commandTimeout: settings.connectTimeoutMs });
  }

  async list(query: DeadLetterQuery): Promise<DeadLetterListing> {
    checkQuery(query);
    const listing = new ListingBuilder(query);
    await this.scan(query.model, (_job, letter) => {
      listing.add(letter);
      return Promise.resolve(true);
    });
    return listing.build();
  }

  async replay(options: ReplayOptions): Promise<ReplayReport> {
    checkQuery(options);
    const tally = new ReplayTally(options);
    try {
      await this.scan(options.model, async (job, letter, data) => {
        tally.progress();
        // Between records: the one before went out in full (re-added and removed from the DLQ).
        if (tally.stopping()) return false;
        if (!tally.read(letter)) return true;
        if (tally.stopsAtLimit()) return false;
        // A dry run writes nothing, so it claims nothing either.
        const claim = options.dryRun === true ? undefined : await this.claim(job);
        try {
          // Its page was loaded a while ago: a record removed since (TTL sweep, another replay, an
          // operator) is passed over rather than re-sent (BullMQ's remove of a job gone succeeds silently).
          if ((await job.getState()) === 'unknown') return true;
          tally.matched++;
          if (claim?.held === false) {
            tally.skip(letter.ref, { why: `another replay is re-sending it right now; if that one did not finish, replay again in ${REPLAY_CLAIM_TTL_MS / 1000} s` });
            return true;
          }
          const done = await this.replayOne(options, letter, data, job, claim);
          // Stopped before its re-add: the record stays in the DLQ, its claim released below.
          if ('stopped' in done) {
            tally.stopped = true;
            return false;
          }
          if ('resent' in done) {
            tally.replayed++;
            if (done.refreshed !== undefined) tally.refreshed.push({ ref: letter.ref, why: done.refreshed });
          } else if ('passedOver' in done) tally.passedOver.push({ ref: letter.ref, why: done.passedOver });
          else tally.skip(letter.ref, done);
        } finally {
          await claim?.release();
        }
        return true;
      });
    } catch (err) {
      throw tally.failed(this.redisFailure(err), `replaying the DLQ of ${options.model} failed`);
    }
    tally.progress(true);
    return tally.report();
  }

  /**
   * Removes matching records whose deadline has passed. Each is claimed first, as by replay, so a
   * replay running at the same time (--refresh-deadline) does not re-send a record this removes.
   */
  async purge(options: PurgeOptions): Promise<PurgeReport> {
    checkQuery(options);
    const tally = new ReplayTally(options);
    const purged: Array<{ ref: string; why: string }> = [];
    const skipped: Array<{ ref: string; why: string }> = [];
    let kept = 0;
    try {
      await this.scan(options.model, async (job, letter) => {
        tally.progress();
        if (!tally.read(letter)) return true;
        if (tally.full) return false;
        if (letter.deadlineAt === undefined || letter.deadlineAt > Date.now()) {
          tally.matched++;
          kept++;
          return true;
        }
        const claim = options.dryRun === true ? undefined : await this.claim(job);
        try {
          if ((await job.getState()) === 'unknown') return true;
          tally.matched++;
          if (claim?.held === false) {
            skipped.push({ ref: letter.ref, why: `a replay is re-sending it right now; if it is still in the DLQ, purge again in ${REPLAY_CLAIM_TTL_MS / 1000} s` });
            return true;
          }
          if (options.dryRun !== true) await job.remove();
          tally.replayed++;
          purged.push({ ref: letter.ref, why: expiredWhy(letter.deadlineAt) });
        } finally {
          await claim?.release();
        }
        return true;
      });
    } catch (err) {
      throw tally.failed(this.redisFailure(err), `purging the DLQ of ${options.model} failed`, 'discarded');
    }
    tally.progress(true);
    return { scanned: tally.scanned, matched: tally.matched, purged, kept, skipped };
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.queues.values()].map((q) => q.close()));
    this.queues.clear();
    this.connection.disconnect();
  }

  /** Re-adds one record's request (unless a dry run) and removes the record. */
  private async replayOne(options: ReplayOptions, letter: DeadLetter, data: DlqJobData, dlqJob: Job, claim: Claim | undefined): Promise<RecordReplay> {
    const { model } = options;
    const jobId = letter.requestId === undefined ? undefined : jobIdFor(letter.requestId);
    const sourceQueue = letter.source !== undefined && sourcePriority(this.settings.queueTemplate, model, letter.source) !== null ? letter.source : undefined;
    const earlier = jobId === undefined || sourceQueue === undefined ? undefined : await Job.fromId(this.queue(sourceQueue), jobId);
    const state = earlier === undefined ? undefined : await earlier.getState();
    // This record's own re-send, by a replay stopped before it removed the record (Ctrl-C, a crash):
    // re-sending it again would serve the request twice, so only the removal is left. Not when the
    // job is in no state list ('unknown', below): that add failed part way and nothing went out.
    if (earlier?.name === replayJobName(letter.ref) && state !== 'unknown') {
      if (options.dryRun !== true && claim !== undefined) await removeRecord(letter, dlqJob, claim);
      return { passedOver: `its re-send (job ${jobId ?? ''}, ${state ?? 'unknown'}) is in ${sourceQueue ?? ''} already: a replay stopped before it removed the record; ${options.dryRun === true ? 'a real run removes it' : 'removed it now'}` };
    }
    const nowMs = Date.now();
    const target = replayTarget(letter, { template: this.settings.queueTemplate, model, nowMs, priorityRequired: true, priority: options.priority, refreshDeadlineMs: options.refreshDeadlineMs });
    if ('why' in target) return target;
    const resent = { resent: true, refreshed: target.deadlineAt === undefined ? undefined : refreshedWhy(letter, target.deadlineAt, nowMs) } as const;
    const { priority } = target;
    const source = this.queue(target.source);
    if (jobId !== undefined) {
      // 'unknown': a job hash in no state list, left by an add whose script failed part way (Redis
      // does not roll a script back: OOM at maxmemory, a damaged key). Nobody holds it, and BullMQ
      // would take the re-add for a duplicate and drop it, so it is removed like an answered one.
      if (earlier !== undefined && state !== 'completed' && state !== 'failed' && state !== 'unknown') {
        return { why: `request ${letter.requestId} is still in ${letter.source} (${state}); replay it once that one is answered` };
      }
      if (earlier?.failedReason === STALLED_OUT) {
        return { why: `request ${letter.requestId} was just given up on by BullMQ and is being answered; replay again in a minute` };
      }
      if (options.dryRun === true) return resent;
      const original = data.original as { replyTo?: unknown } | undefined;
      const replyTo = text(original?.replyTo) ?? renderName(this.settings.repliesTemplate, model);
      const reply = replyToProblem('bullmq', replyTo) === undefined ? await Job.fromId(this.queue(replyTo), jobId) : undefined;
      try {
        await reply?.remove();
      } catch {
        // Locked: a subscriber is taking it right now, and the new reply would be dropped behind it.
        return { why: `the earlier reply to ${letter.requestId} on ${replyTo} is being read right now; replay again in a moment` };
      }
      await earlier?.remove();
    }
    if (options.dryRun === true || claim === undefined) return resent;
    // Stopped (Ctrl-C) while this record was looked at: not re-sent, and its claim released, so
    // the next replay takes it at once rather than skip it until the claim lapses.
    if (options.signal?.aborted === true) return { stopped: true };
    if (!(await claim.renew())) {
      return { why: `its replay claim lapsed (this replay took over ${REPLAY_CLAIM_TTL_MS / 1000} s on it) and it may be another replay's now; replay again if it is still in the DLQ` };
    }
    // A later deadline goes into the request itself; priority, id and the rest are the original's.
    const request = target.deadlineAt === undefined ? data.original : { ...(data.original as Record<string, unknown>), deadlineAt: target.deadlineAt };
    await source.add(replayJobName(letter.ref), request, {
      ...(jobId === undefined ? {} : { jobId }),
      priority: toBullmqPriority(priority),
      removeOnComplete: KEEP_COMPLETED,
      removeOnFail: KEEP_FAILED,
    });
    await removeRecord(letter, dlqJob, claim);
    return resent;
  }

  /** Claims a DLQ record for this replay (see the class comment); `held` false: another replay has it. */
  private async claim(job: Job): Promise<Claim> {
    const key = `${this.queue(job.queueName).toKey(job.id ?? '')}:replay-claim`;
    const token = randomUUID();
    let kept = false;
    let held: boolean;
    try {
      held = (await this.connection.set(key, token, 'PX', REPLAY_CLAIM_TTL_MS, 'NX')) === 'OK';
    } catch (err) {
      throw bullmqError(this.redisFailure(err), `claiming DLQ record ${job.queueName}/${job.id ?? ''} for replay failed`);
    }
    return {
      held,
      renew: async () => (await this.connection.eval(RENEW_CLAIM, 1, key, token, String(REPLAY_CLAIM_TTL_MS))) === 1,
      keep: () => void (kept = true),
      // A release that fails leaves the claim to lapse: the record waits REPLAY_CLAIM_TTL_MS at most.
      release: async () => {
        if (held && !kept) await this.connection.eval(RELEASE_CLAIM, 1, key, token).catch(() => undefined);
      },
    };
  }

  /**
   * The DLQ jobs waiting when the scan began, oldest first, loaded a page at a time (a job gone
   * meanwhile is passed over). `visit` returns false to end the scan.
   */
  private async scan(model: string, visit: (job: Job, letter: DeadLetter, data: DlqJobData) => Promise<boolean>): Promise<void> {
    this.ready ??= ensureRedisAnswers(this.connection, this.settings, this.settings.connectTimeoutMs, 'reading the DLQ failed');
    await this.ready;
    const dlq = this.queue(renderName(this.settings.dlqTemplate, model));
    let ids: string[];
    try {
      ids = await dlq.getRanges(['wait'], 0, -1, true);
    } catch (err) {
      throw bullmqError(this.redisFailure(err), `reading the DLQ queue ${dlq.name} failed`);
    }
    for (let i = 0; i < ids.length; i += PAGE) {
      let page: Array<Job | undefined>;
      try {
        page = await Promise.all(ids.slice(i, i + PAGE).map((id) => Job.fromId(dlq, id)));
      } catch (err) {
        throw bullmqError(this.redisFailure(err), `reading the DLQ queue ${dlq.name} failed`);
      }
      for (const job of page) {
        if (job === undefined) continue;
        const data = (typeof job.data === 'object' && job.data !== null ? job.data : {}) as DlqJobData;
        if (!(await visit(job, letterOf(dlq.name, job, data), data))) return;
      }
    }
  }

  /**
   * A command given up because Redis did not answer (commandTimeout) or the connection kept failing
   * (maxRetriesPerRequest) as the error naming the setting to check, in the producer's words;
   * anything else unchanged. Retriable: a list or replay run again once Redis answers is safe.
   */
  private redisFailure(err: unknown): unknown {
    if (err instanceof FleetError) return err;
    const where = redisWhere(this.settings);
    const url = this.settings.sentinel === undefined ? 'transport.bullmq.redisUrl' : 'transport.bullmq.sentinel';
    if (isCommandTimeout(err)) {
      return new FleetError(
        'TRANSPORT_ERROR',
        `${where} did not answer within ${this.settings.connectTimeoutMs} ms (transport.bullmq.connectTimeoutMs): the connection is open but nothing answers ` +
          `(redis-server stopped, hung or overloaded); check ${url} and that redis-server is up and answering from here, or raise transport.bullmq.connectTimeoutMs for a Redis that is slow for a while`,
        { cause: err, retriable: true },
      );
    }
    if ((err as Error | undefined)?.name === 'MaxRetriesPerRequestError') {
      return new FleetError('TRANSPORT_ERROR', `${where} is unreachable (the connection failed and each reconnect too); check ${url} and that redis-server is up and reachable from here`, {
        cause: err,
        retriable: true,
      });
    }
    return err;
  }

  private queue(name: string): Queue {
    let q = this.queues.get(name);
    if (q === undefined) {
      // BullMQ writes a queue's meta hash when a Queue is made: list and dry runs must write nothing
      // (nor make a misspelt model's queue appear); the workers write it for the queues they use.
      q = new Queue(name, { connection: this.connection, prefix: this.settings.prefix, skipMetasUpdate: true });
      // Without a listener BullMQ console.error's each failed reconnect of the shared connection
      // (a stack trace a retry): the command's own error (redisFailure) says it once, naming the setting.
      q.on('error', () => undefined);
      this.queues.set(name, q);
    }
    return q;
  }
}

/** Removes a record whose request was re-sent. */
async function removeRecord(letter: DeadLetter, dlqJob: Job, claim: Claim): Promise<void> {
  try {
    await dlqJob.remove();
  } catch (err) {
    // The claim is kept until it lapses: a replay racing this one must not re-send it meanwhile.
    claim.keep();
    throw new FleetError('TRANSPORT_ERROR', `${letter.ref} was re-sent but its DLQ record could not be removed (${(err as Error).message}); the next replay removes it`, { cause: err });
  }
}

function letterOf(queue: string, job: Job, data: DlqJobData): DeadLetter {
  const original = typeof data.original === 'object' && data.original !== null ? (data.original as Record<string, unknown>) : undefined;
  const deadlineAt = original?.deadlineAt;
  return {
    ref: `${queue}/${job.id ?? ''}`,
    reason: text(data.reason) ?? '',
    message: text(data.message) ?? '',
    source: text(data.source?.queue),
    priority: level(data.priority) ?? level(original?.priority),
    requestId: text(original?.id) || undefined,
    deadlineAt: typeof deadlineAt === 'number' && Number.isFinite(deadlineAt) ? deadlineAt : undefined,
    deadAt: job.timestamp,
    bytes: Buffer.byteLength(JSON.stringify(data.original ?? null)),
  };
}
