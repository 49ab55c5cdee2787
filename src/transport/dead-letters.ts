import { decodeRequest } from '../codec/index.ts';
import { MAX_PRIORITY_LEVELS, MODEL_NAME_PATTERN } from '../contracts/request-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { HEADERS, renderName } from './names.ts';

/**
 * Reading and re-driving a model's dead-letter topic/queue (`npu-fleet dlq list|replay|purge`). Every
 * transport implements DeadLetters and passes the same conformance tests; what differs is what
 * replay does to the record itself:
 * - Kafka: the DLQ is a log, so a replayed record stays in it; the re-sent message carries the
 *   header `npu-fleet-replay-of` naming the record, and a marker written with it makes later
 *   replays (also ones running at the same time) pass over it (`replayedAt`, `alreadyReplayed`).
 * - BullMQ and memory: a replayed record leaves the DLQ, so replaying twice cannot send it twice;
 *   BullMQ replays running at the same time claim each record first, so they send it once.
 * A replayed request is new work: a request that hung devices runs unbatched only after it hangs
 * one again (its suspect count stays with the old message), so replay DEVICE_HANG records only once
 * the cause is fixed.
 */
export interface DeadLetter {
  /** Where the record sits: Kafka `topic/partition/offset`, BullMQ `queue/jobId`, memory message id. */
  readonly ref: string;
  /** Stable reason code (FleetError code, e.g. INVALID_MESSAGE, UNKNOWN_MODEL, DEVICE_HANG). */
  readonly reason: string;
  readonly message: string;
  /** The request topic/queue the original came from (undefined when the record does not say). */
  readonly source: string | undefined;
  /** Its priority (undefined when the record does not say: replay then needs one given). */
  readonly priority: number | undefined;
  /** The request id, when the original decodes far enough to carry one. */
  readonly requestId: string | undefined;
  /** The request's own deadline, when it has one: past it, a replay would only be answered `expired`. */
  readonly deadlineAt: number | undefined;
  /** Epoch ms when it was dead-lettered. */
  readonly deadAt: number;
  /** Size of the original message (bytes, or its JSON text for BullMQ job data). */
  readonly bytes: number;
  /** Kafka, whose DLQ keeps replayed records: when a replay re-sent it, or a purge discarded it (epoch ms); replays pass it over. */
  readonly replayedAt?: number | undefined;
  /** Kafka: when `dlq purge` discarded it (replayedAt is then that time too). */
  readonly purgedAt?: number | undefined;
}

export interface DeadLetterQuery {
  readonly model: string;
  /** Only these reason codes (default: every reason). */
  readonly reasons?: readonly string[] | undefined;
  /** Only records dead-lettered at or after this epoch ms. */
  readonly sinceAt?: number | undefined;
  /** list: the oldest matching records returned (default 20); replay: most records re-sent (default all). */
  readonly limit?: number | undefined;
}

export interface ReplayOptions extends DeadLetterQuery {
  /** Count what would be re-sent; change nothing. */
  readonly dryRun?: boolean | undefined;
  /** Priority for records that do not say which they had (otherwise they are skipped). */
  readonly priority?: number | undefined;
  /** Called every `progressEvery` records read or re-sent, and once at the end. */
  readonly onProgress?: ((progress: { scanned: number; replayed: number }) => void) | undefined;
  readonly progressEvery?: number | undefined;
  /** Kafka: something the operator should fix that does not stop the replay (the marker topic's retention). */
  readonly onWarning?: ((message: string) => void) | undefined;
  /**
   * Re-sent requests get a deadline no earlier than this long after they are sent (the later of
   * their own and now + this), keeping their priority: records whose deadline passed are re-sent
   * instead of skipped. Without it such records are skipped (`expired` in the report).
   */
  readonly refreshDeadlineMs?: number | undefined;
  /**
   * Stops the replay once aborted (`npu-fleet dlq replay` on Ctrl-C / SIGTERM): checked between
   * records (BullMQ, memory; a BullMQ record claimed but not yet re-sent is released, so the next
   * replay takes it at once) and between transactions (Kafka). What went out before is re-sent in
   * full and counted in `replayed`; the report says `stopped`. Nothing is lost or sent twice: the
   * same replay run again re-sends the rest.
   */
  readonly signal?: AbortSignal | undefined;
}

export interface DeadLetterListing {
  /** Records read (dead-lettered at or after sinceAt). */
  readonly scanned: number;
  /** Of those, how many per reason (every reason, so the filter's effect is visible). */
  readonly byReason: Readonly<Record<string, number>>;
  /** The matching records, oldest first, at most `limit`. */
  readonly letters: readonly DeadLetter[];
  /** Matching records in all (also those beyond `limit`). */
  readonly matched: number;
  /** Kafka: of the matching records, those a replay already re-sent (elsewhere a replayed record leaves the DLQ). */
  readonly alreadyReplayed?: number | undefined;
}

export interface ReplayReport {
  readonly scanned: number;
  readonly matched: number;
  /** Re-sent (dry run: would be). */
  readonly replayed: number;
  /** Matching records that could not be re-sent, each with why; `expired`: only because its deadline had passed. */
  readonly skipped: ReadonlyArray<{ readonly ref: string; readonly why: string; readonly expired?: true }>;
  /** The records counted in alreadyReplayed, each with why it was passed over. */
  readonly passedOver?: ReadonlyArray<{ readonly ref: string; readonly why: string }> | undefined;
  /** Records re-sent with a later deadline than their own (refreshDeadlineMs), each with both deadlines. */
  readonly refreshed?: ReadonlyArray<{ readonly ref: string; readonly why: string }> | undefined;
  /**
   * Kafka: matching records an earlier replay re-sent (the DLQ keeps them), or second records of a
   * message re-sent already, passed over; not skips, since nothing is left to do for them
   * (elsewhere a replayed record leaves the DLQ). BullMQ: records whose request a replay stopped
   * before removing them (Ctrl-C, a crash) had re-sent, passed over and removed.
   */
  readonly alreadyReplayed?: number | undefined;
  /**
   * The replay stopped at `limit` with records left unread, one of them matching at least: how many
   * match beyond it is not known without reading them all (`matched` counts those read). Absent
   * when the limit was not reached, or was reached at the last record.
   */
  readonly stoppedAtLimit?: true | undefined;
  /**
   * `signal` was aborted and the replay stopped before the end of the DLQ: `replayed` is exactly
   * what was re-sent, `matched` and `scanned` what was read before it stopped.
   */
  readonly stopped?: true | undefined;
}

export interface PurgeOptions extends DeadLetterQuery {
  /**
   * Only records whose own deadline has passed. The one purge there is, asked for by name, so a
   * slip of the command line cannot discard records a replay could still re-drive.
   */
  readonly expired: true;
  /** Count what would be discarded; change nothing. */
  readonly dryRun?: boolean | undefined;
  readonly onProgress?: ReplayOptions['onProgress'];
  readonly progressEvery?: number | undefined;
  readonly onWarning?: ReplayOptions['onWarning'];
}

export interface PurgeReport {
  readonly scanned: number;
  readonly matched: number;
  /** Discarded (dry run: would be), each with why. */
  readonly purged: ReadonlyArray<{ readonly ref: string; readonly why: string }>;
  /** Matching records kept: no deadline, or one not passed yet. */
  readonly kept: number;
  /** Matching expired records that could not be discarded now (another replay holds them), each with why. */
  readonly skipped: ReadonlyArray<{ readonly ref: string; readonly why: string }>;
  /** Kafka: matching records replayed or purged before, passed over (the log keeps them). */
  readonly alreadyDone?: number | undefined;
}

/** Why a record is discarded by `dlq purge --expired`. */
export function expiredWhy(deadlineAt: number): string {
  return `its deadline passed at ${new Date(deadlineAt).toISOString()}`;
}

export interface DeadLetters {
  list(query: DeadLetterQuery): Promise<DeadLetterListing>;
  /**
   * Re-sends each matching record's original message, unchanged, to the request topic/queue it
   * came from at its priority, in DLQ order (BullMQ, memory: oldest first; Kafka: partition by
   * partition in offset order), reading the DLQ as it was when the replay began. The workers
   * then treat it as a new request. Records whose source is unknown, or whose own deadline has
   * passed, are skipped and reported.
   */
  replay(options: ReplayOptions): Promise<ReplayReport>;
  /**
   * Discards matching records whose deadline has passed (`npu-fleet dlq purge --expired`). Kafka
   * and BullMQ only: the memory broker's DLQ lives and dies with `npu-fleet start`.
   */
  purge?(options: PurgeOptions): Promise<PurgeReport>;
  close(): Promise<void>;
}

/** Inside the query's time window (records before `sinceAt` are not even counted). */
export function inWindow(letter: Pick<DeadLetter, 'deadAt'>, query: DeadLetterQuery): boolean {
  return query.sinceAt === undefined || letter.deadAt >= query.sinceAt;
}

/** One of the query's reasons (all when it names none). */
export function matchesReason(letter: Pick<DeadLetter, 'reason'>, query: DeadLetterQuery): boolean {
  return query.reasons === undefined || query.reasons.length === 0 || query.reasons.includes(letter.reason);
}

/**
 * Which priority of `model` the request topic/queue `source` is for: a number, `undefined` when
 * the template has no `{priority}` (one source per model), or `null` when `source` is not one of
 * the model's request sources (replay must not send there).
 */
export function sourcePriority(template: string, model: string, source: string): number | undefined | null {
  if (!template.includes('{priority}')) return renderName(template, model) === source ? undefined : null;
  for (let p = 0; p < MAX_PRIORITY_LEVELS; p++) if (renderName(template, model, p) === source) return p;
  return null;
}

/** The request id and deadline in an original message, best effort (invalid messages often still carry an id). */
export function requestFacts(body: Uint8Array): { requestId: string | undefined; deadlineAt: number | undefined } {
  try {
    const request = decodeRequest(body);
    return { requestId: request.id, deadlineAt: request.deadlineAt };
  } catch (err) {
    const id = err instanceof FleetError ? err.details['id'] : undefined;
    return { requestId: typeof id === 'string' && id !== '' ? id : undefined, deadlineAt: undefined };
  }
}

/**
 * Where a matching record is re-sent, or why it cannot be: a source that is not one of the model's
 * request topics/queues, a deadline already past (the workers would answer it `expired` at once,
 * and on BullMQ and memory the record would be gone), or, where the broker needs one (BullMQ,
 * memory), no priority recorded and none given.
 */
interface TargetOptions {
  readonly template: string;
  readonly model: string;
  readonly nowMs: number;
  /** For records that recorded none. */
  readonly priority?: number | undefined;
  /** Milliseconds from nowMs: a deadline before nowMs + this is moved to it (ReplayOptions.refreshDeadlineMs). */
  readonly refreshDeadlineMs?: number | undefined;
}
/** Where a record goes; `deadlineAt`: the later deadline it is re-sent with (refreshDeadlineMs), when its own is earlier. */
export interface ReplayTarget<P> {
  readonly source: string;
  readonly priority: P;
  readonly deadlineAt?: number | undefined;
}
/** Why a record is not re-sent; `expired`: only its deadline stands in the way (refreshDeadlineMs would send it). */
export interface NoReplay {
  readonly why: string;
  readonly expired?: true;
}
export function replayTarget(letter: DeadLetter, o: TargetOptions & { readonly priorityRequired: true }): ReplayTarget<number> | NoReplay;
export function replayTarget(letter: DeadLetter, o: TargetOptions & { readonly priorityRequired: false }): ReplayTarget<number | undefined> | NoReplay;
export function replayTarget(letter: DeadLetter, o: TargetOptions & { readonly priorityRequired: boolean }): ReplayTarget<number | undefined> | NoReplay {
  if (letter.source === undefined || sourcePriority(o.template, o.model, letter.source) === null) {
    return { why: `its source ${letter.source ?? '(none recorded)'} is not a request topic/queue of ${o.model}` };
  }
  const priority = letter.priority ?? o.priority;
  if (o.priorityRequired && priority === undefined) return { why: 'no priority recorded; give one (--priority)' };
  const freshAt = o.refreshDeadlineMs === undefined ? undefined : o.nowMs + o.refreshDeadlineMs;
  if (letter.deadlineAt !== undefined && freshAt !== undefined && letter.deadlineAt < freshAt) return { source: letter.source, priority, deadlineAt: freshAt };
  if (letter.deadlineAt !== undefined && letter.deadlineAt <= o.nowMs) {
    return {
      why: `its deadline passed at ${new Date(letter.deadlineAt).toISOString()}; re-sent as it is it would only be answered expired (dlq replay --refresh-deadline DURATION re-sends it with a new one, dlq purge --expired discards it)`,
      expired: true,
    };
  }
  return { source: letter.source, priority };
}

/** The report line of a record re-sent with a later deadline. */
export function refreshedWhy(letter: Pick<DeadLetter, 'deadlineAt'>, deadlineAt: number, nowMs: number): string {
  const own = letter.deadlineAt === undefined ? 'none' : new Date(letter.deadlineAt).toISOString();
  return `its deadline ${own}${letter.deadlineAt !== undefined && letter.deadlineAt <= nowMs ? ' had passed' : ''}; re-sent with deadline ${new Date(deadlineAt).toISOString()}`;
}

/** Headers of a re-sent message: the original's without the DLQ's own, and which record it replays. */
export function replayHeaders<V>(headers: Readonly<Record<string, V | undefined>>, ref: string): Record<string, V | string> {
  const out: Record<string, V | string> = {};
  for (const [k, v] of Object.entries(headers)) if (!k.startsWith('npu-fleet-dlq-') && k !== HEADERS.replayOf && v !== undefined) out[k] = v;
  // Set last: a record replayed, dead-lettered again and replayed again names its latest record.
  out[HEADERS.replayOf] = ref;
  return out;
}

/** Checks a query before anything connects; the error names the field. */
export function checkQuery(query: DeadLetterQuery): void {
  if (query.model.trim() === '') throw new FleetError('INVALID_ARGUMENT', 'model is required (the DLQ is per model)', { details: { field: 'model' } });
  // No model has such a name: on Kafka it read as an empty DLQ, on BullMQ (':') it crashed in the client.
  if (!MODEL_NAME_PATTERN.test(query.model)) {
    throw new FleetError('INVALID_ARGUMENT', `model must match ${MODEL_NAME_PATTERN.source} (a model name, as in the model repository), got "${query.model.slice(0, 80)}"`, { details: { field: 'model' } });
  }
  if (query.limit !== undefined && (!Number.isInteger(query.limit) || query.limit < 1)) {
    throw new FleetError('INVALID_ARGUMENT', `limit must be an integer >= 1, got ${query.limit}`, { details: { field: 'limit' } });
  }
}

/**
 * Builds a list() answer from the records read in any order (Kafka reads partitions side by side):
 * every record in the window counted by reason, and the oldest `limit` matching ones kept.
 */
export class ListingBuilder {
  private scanned = 0;
  private matched = 0;
  private readonly byReason: Record<string, number> = {};
  /** Sorted by deadAt, at most `limit` long. */
  private readonly letters: DeadLetter[] = [];

  constructor(private readonly query: DeadLetterQuery) {}

  add(letter: DeadLetter): void {
    if (!inWindow(letter, this.query)) return;
    this.scanned++;
    this.byReason[letter.reason] = (this.byReason[letter.reason] ?? 0) + 1;
    if (!matchesReason(letter, this.query)) return;
    this.matched++;
    const limit = this.query.limit ?? 20;
    const last = this.letters[this.letters.length - 1];
    if (this.letters.length >= limit && last !== undefined && letter.deadAt >= last.deadAt) return;
    let i = this.letters.length;
    while (i > 0 && (this.letters[i - 1]?.deadAt ?? 0) > letter.deadAt) i--;
    this.letters.splice(i, 0, letter);
    if (this.letters.length > limit) this.letters.pop();
  }

  build(): DeadLetterListing {
    return { scanned: this.scanned, byReason: { ...this.byReason }, letters: [...this.letters], matched: this.matched };
  }
}

/** A replay's running count, and its progress reports every `progressEvery` records read. */
export class ReplayTally {
  scanned = 0;
  matched = 0;
  replayed = 0;
  readonly skipped: Array<{ ref: string; why: string; expired?: true }> = [];
  readonly passedOver: Array<{ ref: string; why: string }> = [];
  readonly refreshed: Array<{ ref: string; why: string }> = [];
  /** Set where a replay stops at its limit before the end of the DLQ (ReplayReport.stoppedAtLimit). */
  stoppedAtLimit = false;
  /** Set where a replay stops on its aborted signal (ReplayReport.stopped). */
  stopped = false;
  private reported = { scanned: 0, replayed: 0 };

  constructor(private readonly options: ReplayOptions) {}

  /** A matching record not re-sent: `no.expired` marks one that only its passed deadline holds back. */
  skip(ref: string, no: NoReplay): void {
    this.skipped.push(no.expired === true ? { ref, why: no.why, expired: true } : { ref, why: no.why });
  }

  /** Counts a record read; false when it is outside the replay's filter. */
  read(letter: DeadLetter): boolean {
    if (!inWindow(letter, this.options)) return false;
    this.scanned++;
    return matchesReason(letter, this.options);
  }

  /** The error a replay that failed part way throws: what was re-sent before it is part of it. */
  failed(err: unknown, what: string, done = 're-sent'): FleetError {
    const cause = FleetError.from(err, 'TRANSPORT_ERROR');
    return new FleetError(cause.code, `${what}: ${cause.message}; ${this.replayed} record(s) were ${done} before it, the rest were not`, {
      cause: err,
      retriable: cause.retriable,
    });
  }

  /** True once `limit` records were re-sent. */
  get full(): boolean {
    return this.options.limit !== undefined && this.replayed >= this.options.limit;
  }

  /**
   * Called with a matching record read (tally.read true) before it is counted: true when the limit
   * is reached, so the replay stops here, with this record and any after it unread (stoppedAtLimit).
   * `pending`: records taken but not yet counted as re-sent (Kafka sends a batch's at its end).
   */
  stopsAtLimit(pending = 0): boolean {
    if (this.options.limit === undefined || this.replayed + pending < this.options.limit) return false;
    this.stoppedAtLimit = true;
    return true;
  }

  /** True when the replay's signal was aborted: it stops here (ReplayReport.stopped). */
  stopping(): boolean {
    if (this.options.signal?.aborted === true) this.stopped = true;
    return this.stopped;
  }

  /** Reports when `progressEvery` more records were read or re-sent (Kafka reads a fetch batch, then re-sends it in chunks). */
  progress(final = false): void {
    const every = this.options.progressEvery ?? 1000;
    if (!final && this.scanned - this.reported.scanned < every && this.replayed - this.reported.replayed < every) return;
    this.reported = { scanned: this.scanned, replayed: this.replayed };
    this.options.onProgress?.({ scanned: this.scanned, replayed: this.replayed });
  }

  report(): ReplayReport {
    return {
      scanned: this.scanned,
      matched: this.matched,
      replayed: this.replayed,
      skipped: [...this.skipped],
      alreadyReplayed: this.passedOver.length,
      passedOver: [...this.passedOver],
      refreshed: [...this.refreshed],
      ...(this.stoppedAtLimit ? { stoppedAtLimit: true as const } : {}),
      ...(this.stopped ? { stopped: true as const } : {}),
    };
  }
}
