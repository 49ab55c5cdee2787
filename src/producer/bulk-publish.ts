import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import { ZERO_TIMINGS, type ResultEnvelope, type ResultStatus } from '../contracts/result-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import type { Producer } from './producer.ts';
import type { DoneEntries } from './done-lines.ts';
import { ANY_ID_MAY_REPEAT, type RepeatCandidates } from './repeat-candidates.ts';
import type { FileEntry } from './request-file.ts';

/** Requests published per call (one Kafka sendBatch / one BullMQ addBulk per model queue). */
export const BULK_CHUNK = 200;
/** Default bound on requests awaiting their reply at once: the memory a run holds. */
export const DEFAULT_IN_FLIGHT = 1000;

/** Live counts of a bulk run, read by the progress line while it goes on. */
export interface BulkStats {
  /** Entries read from the source (lines or items), valid or not. */
  read: number;
  /** Requests the broker has (their publish resolved, or a reply came), not those only handed to the producer. */
  published: number;
  /** Results received, by status (a late ok counts as ok). */
  readonly answered: Record<ResultStatus, number>;
  /** Entries refused before sending (not a request, a repeated id, a check failed): an invalid record each. */
  invalidEntries: number;
  /** Skipped: the resumed output already holds an ok result for their id. */
  skipped: number;
  /** Published, but no reply within timeoutMs (or the publish failed): a failed record each. */
  unanswered: number;
  /**
   * Awaited on BullMQ: not added, their ids held by earlier jobs of other inputs not yet answered
   * (ID_IN_USE): a failed record each, for a --resume once those jobs are answered.
   */
  idInUse: number;
  /** Published, then given up when the run was stopped (no record written: a resumed run re-sends them). */
  abandoned: number;
  /** Fire and forget on BullMQ: published, but not added, an earlier job of the id being kept (PublishOptions.onDropped); the first few ids. */
  readonly dropped: { count: number; readonly ids: string[] };
}

export function newBulkStats(): BulkStats {
  return { read: 0, published: 0, answered: { ok: 0, expired: 0, rejected: 0, invalid: 0, failed: 0 }, invalidEntries: 0, skipped: 0, unanswered: 0, idInUse: 0, abandoned: 0, dropped: { count: 0, ids: [] } };
}

export const answeredCount = (s: BulkStats): number => Object.values(s.answered).reduce((a, b) => a + b, 0);

export interface BulkPublishOptions {
  readonly producer: Pick<Producer, 'publish' | 'requestMany'>;
  readonly entries: AsyncIterable<FileEntry>;
  /** Await each reply (request-and-reply) or only publish. */
  readonly awaitReplies: boolean;
  /**
   * What an entry's number counts in the records' messages: `line` of a JSON Lines file, `item` of
   * a JSON array (its whole text may be one line; the file reader says "item N" there too).
   */
  readonly unit?: 'line' | 'item';
  /** Per request, from its publish. */
  readonly timeoutMs: number;
  /** At most this many requests await their reply at once (awaitReplies). */
  readonly inFlight?: number;
  /** Last changes and checks before a request is sent (overrides, priority range): throws FleetError to refuse it. */
  readonly prepare?: (request: RequestEnvelope) => void;
  /** Entries already answered ok (a resumed run): not sent again. */
  readonly done?: DoneEntries;
  /**
   * Not a resumed run: every request runs, even one whose id an earlier run had answered
   * (RequestOptions.rerunAnswered); a resumed run takes an earlier ok answer for its id.
   */
  readonly fresh?: boolean;
  /**
   * Ids that may occur on more than one entry (all that do, maybe others): only their first
   * lines are remembered, to refuse a repeat. Default: every id, one Map entry each for the whole
   * run (about 100 bytes): a data set of millions of lines passes findRepeatCandidates' instead.
   */
  readonly repeats?: RepeatCandidates;
  /**
   * Every record of the run, in arrival order: each result, and an `invalid` / `failed` result
   * made here for an entry refused before sending or a request left unanswered. Awaited: a slow
   * writer holds the run back (the in-flight bound still holds). `line` is the entry's line (or
   * item) number, which a resumed run's `done` can go by.
   */
  readonly onRecord: (record: ResultEnvelope, line: number) => void | Promise<void>;
  /**
   * awaitReplies: a request timing out before any reply at all came (no worker serving: each line
   * would wait out timeoutMs in turn) stops reading; the requests sent get their records as they
   * time out, the lines read and not sent a failed one, and the run throws TIMEOUT. Once any reply
   * came, timeouts do not stop it.
   */
  readonly stopIfNoneAnswered?: boolean;
  /** Whether to stop reading (Ctrl-C): what is in flight is then left to close(). */
  readonly stopped?: () => boolean;
  readonly stats?: BulkStats;
  readonly nowMs?: () => number;
}

/** A request of the run and the line (or item) it came from. */
interface Entry {
  readonly request: RequestEnvelope;
  readonly line: number;
}

/**
 * One requestMany() of the run: whether its publish resolved yet (RequestOptions.onPublished) and
 * how many of it a reply proved published before that (counted then, not again).
 */
interface Send {
  acked: boolean;
  repliedFirst: number;
}

/**
 * A refusal of one line's request as that line's record. The producer words a refusal for a whole
 * publish ("invalid request [3] ...; nothing was published"), which on a line's record read as if
 * the run had sent nothing; the line was sent alone, and only it was refused. Its details give the
 * request's problem alone (`problem`, request-check.ts and kafka-message-sizes.ts), from which the
 * line's message is made; a refusal without one (prepare's own checks) is kept as it is worded.
 */
function lineRefusal(error: FleetError, request: RequestEnvelope, line: number, unit: 'line' | 'item'): FleetError {
  const problem = error.details['problem'];
  const message =
    typeof problem === 'string'
      ? `${unit} ${line}: invalid request (id ${JSON.stringify(request.id.slice(0, 128))}): ${problem}; this ${unit} was not sent (the others are)`
      : `${unit} ${line}: ${error.message}`;
  const { problem: _problem, index: _index, ...details } = error.details;
  return new FleetError(error.code, message, { cause: error, details: { ...details, line } });
}

/** The producer's checks refused the request before sending it (docs/producers.md, "The producer's checks"). */
const isRefusal = (error: FleetError): boolean => error.code === 'INVALID_ARGUMENT' || error.code === 'LIMIT_EXCEEDED';

/**
 * Publishes a stream of requests (a data set to score) in chunks, with at most `inFlight` awaiting
 * their reply, and accounts for every entry: one record each in `onRecord` (a result, or why there
 * is none) except those skipped as already done and those abandoned by a stop. Nothing is lost to
 * a bad line: it gets an `invalid` record naming the line and the field, and the run goes on.
 * Ids must be unique in a run (replies are matched by id): a repeat is refused as invalid.
 */
export async function bulkPublish(o: BulkPublishOptions): Promise<BulkStats> {
  const stats = o.stats ?? newBulkStats();
  const now = o.nowMs ?? Date.now;
  const inFlight = Math.max(1, o.inFlight ?? DEFAULT_IN_FLIGHT);
  const chunkSize = Math.min(BULK_CHUNK, inFlight);
  const repeats = o.repeats ?? ANY_ID_MAY_REPEAT;
  const unit = o.unit ?? 'line';
  /** The first line of each id that may repeat: a repeat is refused only when its id is here (never on a guess). */
  const firstLineOf = new Map<string, number>();
  const pending = new Set<Promise<void>>();
  /** Wakes flush() waiting for room when one of `pending` settles (see flush). */
  let wake: (() => void) | undefined;
  const settledOne = (): void => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  let chunk: Entry[] = [];
  /** Set when the run stops reading on a failed publish, or on no reply at all (stopIfNoneAnswered). */
  let sendFailure: FleetError | undefined;
  let noneAnswered = false;
  /** The records' writer failed (a full disk): the run stops, as nothing more could be kept. */
  let recordFailure: FleetError | undefined;
  const record = async (r: ResultEnvelope, line: number): Promise<void> => {
    if (recordFailure !== undefined) return;
    try {
      await o.onRecord(r, line);
    } catch (err) {
      recordFailure = FleetError.from(err, 'INTERNAL');
    }
  };

  const stoppedBy = (error: FleetError): boolean => error.code === 'CLOSED' && o.stopped?.() === true;

  const local = (status: 'invalid' | 'failed', error: FleetError, id: string, model: string, device = -1): ResultEnvelope => ({
    id,
    model,
    version: '',
    status,
    error: error.toResultError(),
    timings: ZERO_TIMINGS,
    batchSize: 0,
    gear: 0,
    device,
    worker: 'npu-fleet publish',
    completedAt: now(),
  });

  /** A request the producer refused before sending (its checks): an invalid record naming the line; the run goes on. */
  const refusedAlone = async ({ request, line }: Entry, error: FleetError): Promise<void> => {
    stats.invalidEntries++;
    await record(local('invalid', lineRefusal(error, request, line, unit), request.id, request.model), line);
  };

  /**
   * requestMany with `published` counted as the broker takes the requests, not as they are handed
   * over: with the broker gone mid-run its publishes retry and time out, and the progress line
   * counted every line read as published meanwhile.
   */
  const requestMany = (entries: readonly Entry[]): { replies: Array<Promise<ResultEnvelope>>; send: Send } => {
    const send: Send = { acked: false, repliedFirst: 0 };
    const replies = o.producer.requestMany(
      entries.map((e) => e.request),
      {
        timeoutMs: o.timeoutMs,
        // A line answered other than ok by an earlier run (BullMQ keeps that job an hour) runs
        // again: a resumed run re-sends exactly those lines for another try.
        rerunNotOk: true,
        rerunAnswered: o.fresh === true,
        onPublished: (count) => {
          if (send.acked) return;
          send.acked = true;
          stats.published += Math.max(0, count - send.repliedFirst);
        },
      },
    );
    return { replies, send };
  };

  const settle = async (reply: Promise<ResultEnvelope>, entry: Entry, alone: boolean, send: Send): Promise<void> => {
    const { request } = entry;
    let result: ResultEnvelope;
    try {
      result = await reply;
      stats.answered[result.status]++;
      // A reply is proof the broker had it, whether or not its publish was reported yet (or at all:
      // a send whose ack was lost).
      if (!send.acked) {
        send.repliedFirst++;
        stats.published++;
      }
    } catch (err) {
      const error = FleetError.from(err, 'TRANSPORT_ERROR');
      if (isRefusal(error)) {
        // The producer refuses a whole publish for one bad request (on Kafka a priority no worker
        // reads, which prepare cannot see without the model's config): each of the chunk goes
        // again on its own, so only the bad one is refused.
        if (alone) return refusedAlone(entry, error);
        if (o.stopped?.() !== true) {
          const again = requestMany([entry]);
          return settle(again.replies[0] as Promise<ResultEnvelope>, entry, true, again.send);
        }
        stats.abandoned++;
        return;
      }
      if (stoppedBy(error)) {
        stats.abandoned++;
        return;
      }
      // A broker refusing publishes would fail every later chunk too: the run stops reading. (Not
      // counted published unless its publish had resolved: onPublished counts it then.) An id
      // another job of other inputs holds is this line's alone: it is recorded failed, for a
      // --resume once that job is answered.
      if (error.code === 'ID_IN_USE') {
        stats.idInUse++;
      } else {
        if (error.code !== 'TIMEOUT') {
          sendFailure ??= error;
        } else if (o.stopIfNoneAnswered === true && answeredCount(stats) === 0 && sendFailure === undefined) {
          noneAnswered = true;
          sendFailure = new FleetError('TIMEOUT', `no request was answered within ${o.timeoutMs} ms (--timeout-ms)`, { cause: error });
        }
        stats.unanswered++;
      }
      result = local('failed', error, request.id, request.model);
    }
    await record(result, entry.line);
  };

  /**
   * Entries read but never sent, the run stopping on a publish that failed: a failed record each
   * (every entry read gets one), counted unanswered. A resumed run sends them again.
   */
  const notSent = async (entries: readonly Entry[], failure: FleetError): Promise<void> => {
    for (const { request, line } of entries) {
      stats.unanswered++;
      await record(local('failed', new FleetError(failure.code, `not sent: publishing stopped on an earlier failure: ${failure.message}`, { cause: failure }), request.id, request.model), line);
    }
  };

  // Ids named in the message; the count covers the rest.
  const onDropped = (ids: readonly string[]): void => {
    stats.dropped.count += ids.length;
    for (const id of ids) if (stats.dropped.ids.length < 5) stats.dropped.ids.push(id);
  };

  /** Fire and forget of one request; false when publishing failed (the run stops). */
  const publishAlone = async (entry: Entry): Promise<boolean> => {
    try {
      await o.producer.publish(entry.request, { onDropped });
      stats.published++;
      return true;
    } catch (err) {
      const error = FleetError.from(err, 'TRANSPORT_ERROR');
      if (!isRefusal(error)) {
        if (!stoppedBy(error)) sendFailure ??= error;
        return false;
      }
      await refusedAlone(entry, error);
      return true;
    }
  };

  const flush = async (): Promise<void> => {
    if (chunk.length === 0) return;
    const sending = chunk;
    chunk = [];
    if (!o.awaitReplies) {
      try {
        await o.producer.publish(
          sending.map((e) => e.request),
          { onDropped },
        );
        stats.published += sending.length;
      } catch (err) {
        const error = FleetError.from(err, 'TRANSPORT_ERROR');
        // Stopped (Ctrl-C closed the producer under this publish): not a failure; the run ends.
        if (stoppedBy(error)) return;
        if (!isRefusal(error)) sendFailure ??= error;
        // One bad request refuses its whole publish (see settle): each goes on its own.
        else for (const entry of sending) if (!(await publishAlone(entry))) break;
      }
      return;
    }
    // Not Promise.race(pending): each race adds a reaction to every pending reply, kept until that
    // reply settles, so waiting for room cost O(inFlight) per settle in time and memory (100,000
    // requests at --in-flight 1000 took 53 s of CPU; at 10,000 the heap ran out).
    while (pending.size > 0 && pending.size + sending.length > inFlight) await new Promise<void>((resolve) => (wake = resolve));
    // Stopped or failing while waiting for room: the chunk stays unsent (a resumed run sends it).
    if (o.stopped?.() === true || recordFailure !== undefined) return;
    if (sendFailure !== undefined) return notSent(sending, sendFailure);
    const { replies, send } = requestMany(sending);
    replies.forEach((reply, i) => {
      const tracked: Promise<void> = settle(reply, sending[i] as Entry, sending.length === 1, send).finally(() => {
        pending.delete(tracked);
        settledOne();
      });
      pending.add(tracked);
    });
  };

  for await (const entry of o.entries) {
    if (o.stopped?.() === true || sendFailure !== undefined || recordFailure !== undefined) break;
    stats.read++;
    if ('error' in entry) {
      stats.invalidEntries++;
      await record(local('invalid', entry.error, entry.id ?? '', entry.model ?? ''), entry.line);
      continue;
    }
    const request = entry.request;
    // Repeats first, so a repeated id is refused alike whether or not a resumed run skips it.
    const mayRepeat = repeats.mayRepeat(request.id);
    const first = mayRepeat ? firstLineOf.get(request.id) : undefined;
    if (first !== undefined) {
      stats.invalidEntries++;
      const error = new FleetError('INVALID_ARGUMENT', `${unit} ${entry.line}: id "${request.id}" repeats ${unit} ${first}; ids must be unique in a run (replies are matched by id)`, {
        details: { field: 'id', line: entry.line },
      });
      await record(local('invalid', error, request.id, request.model), entry.line);
      continue;
    }
    if (mayRepeat) firstLineOf.set(request.id, entry.line);
    if (o.done?.isDone(entry.line, request.id) === true) {
      stats.skipped++;
      continue;
    }
    try {
      o.prepare?.(request);
    } catch (err) {
      stats.invalidEntries++;
      const e = FleetError.from(err, 'INVALID_ARGUMENT');
      await record(local('invalid', lineRefusal(e, request, entry.line, unit), request.id, request.model), entry.line);
      continue;
    }
    chunk.push({ request, line: entry.line });
    if (chunk.length >= chunkSize) await flush();
  }
  if (o.stopped?.() !== true && recordFailure === undefined && o.awaitReplies) await flush();
  else if (o.stopped?.() !== true && sendFailure === undefined && recordFailure === undefined) await flush();
  await Promise.all(pending);
  if (recordFailure !== undefined) {
    throw new FleetError(recordFailure.code, `stopped after ${stats.read} entries read: recording a result failed: ${recordFailure.message}`, { cause: recordFailure });
  }
  if (sendFailure !== undefined && noneAnswered) {
    throw new FleetError('TIMEOUT', `${sendFailure.message}: stopped after ${stats.published} of the requests read were published (${stats.read} read)`, {
      cause: sendFailure,
      retriable: true,
      details: { published: stats.published, read: stats.read, noneAnswered: true },
    });
  }
  if (sendFailure !== undefined) {
    throw new FleetError(sendFailure.code, `publishing stopped after ${stats.published} of ${stats.read} requests read were published: ${sendFailure.message}`, {
      cause: sendFailure,
      retriable: true,
    });
  }
  return stats;
}
