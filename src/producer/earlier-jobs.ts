import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { resultFromJson } from '../codec/index.ts';
import type { CodecLimits } from '../contracts/limits.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { jobIdFor } from '../transport/bullmq/bullmq-names.ts';
import { INPUT_DIGEST_OPTION } from './input-digest.ts';
import type { ReplyRouter } from './reply-router.ts';

/** How often a request whose earlier job is still queued or running looks for that job's answer. */
export const EARLIER_POLL_MS = 250;

/**
 * The job option naming the add that created a job (BullMQ keeps options it does not know in the
 * job's `opts`). The job's timestamp could not tell adds apart: two producers adding one id in the
 * same millisecond both took the job for their own, and the one whose add was dropped waited for a
 * reply that went to the other's inbox.
 */
export const ADD_TOKEN_OPTION = 'npuFleetAdd';

/** Option `key` of a job's stored `opts` (JSON), or undefined. */
function storedOption(opts: string | null | undefined, key: string): unknown {
  if (opts === null || opts === undefined) return undefined;
  try {
    return (JSON.parse(opts) as Record<string, unknown>)[key];
  } catch {
    return undefined;
  }
}

const addTokenOf = (opts: string | null | undefined): unknown => storedOption(opts, ADD_TOKEN_OPTION);

/**
 * Whether a job's stored `opts` say it asked something else than `digest` (INPUT_DIGEST_OPTION).
 * A job without a digest (added by publishRaw or by an older producer) cannot tell: it is taken
 * to ask the same, as before digests were stored.
 */
function asksOtherwise(opts: string | null | undefined, digest: string | undefined): boolean {
  const stored = storedOption(opts, INPUT_DIGEST_OPTION);
  return digest !== undefined && typeof stored === 'string' && stored !== digest;
}

export interface EarlierJobsOptions {
  /** The producer's shared connection. */
  readonly redis: () => Redis;
  /** The Redis key of the job a request maps to (`prefix:queue:jobId`). */
  readonly jobKey: (request: RequestEnvelope) => string;
  readonly router: ReplyRouter;
  readonly limits: CodecLimits;
  readonly pollMs?: number;
}

/**
 * On BullMQ `jobId = id`, and BullMQ keeps one job per id: an add while an earlier job of that id
 * is retained (answered within KEEP_COMPLETED, or still queued) is dropped without a word. So a
 * request-and-await whose id was asked before (a retry after a timeout, a resumed bulk run) would
 * wait for a reply that never comes: the earlier job answered, or will answer, the earlier
 * replyTo. After each awaited publish this reads the jobs back; one that is not this publish's
 * (another ADD_TOKEN_OPTION) gives its answer instead: its return value at once when it completed, or
 * as soon as it completes (polled), a FleetError when it failed for good. The device does not
 * run the request twice. JS thread only.
 */
export class EarlierJobs {
  private readonly watched = new Map<string, { key: string; id: string }>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: EarlierJobsOptions) {}

  /**
   * After publishing `requests` with ADD_TOKEN_OPTION `token` (unique to that add) and their
   * INPUT_DIGEST_OPTION `digests`: answers those that met an earlier job. An earlier job that asked
   * something else (another digest) does not answer: the request fails ID_IN_USE instead of taking
   * outputs computed from other inputs.
   */
  async check(requests: readonly RequestEnvelope[], token: string, digests: readonly string[] = []): Promise<void> {
    const keys = requests.map((r) => this.o.jobKey(r));
    const pipeline = this.o.redis().pipeline();
    for (const key of keys) pipeline.hmget(key, 'opts', 'finishedOn', 'returnvalue', 'failedReason');
    const rows = (await pipeline.exec()) ?? [];
    requests.forEach((r, i) => {
      const [err, fields] = rows[i] ?? [null, null];
      const [opts, finishedOn] = (fields ?? []) as Array<string | null>;
      // Ours, or already gone (answered and trimmed): the reply comes through the inbox.
      if (err !== null || opts === null || opts === undefined || addTokenOf(opts) === token) return;
      if (asksOtherwise(opts, digests[i])) {
        const state = finishedOn === null || finishedOn === undefined ? 'queued or running' : 'answered a moment ago';
        this.o.router.fail(
          r.id,
          new FleetError(
            'ID_IN_USE',
            `request id "${r.id}" belongs to an earlier job with other inputs, ${state} (on BullMQ a job's id is its request's, one job per id), so this request was not added; ` +
              "that job's answer is not this request's. Publish it under a new id, or again once that job is answered",
            { details: { field: 'id', id: r.id } },
          ),
        );
        return;
      }
      if (!this.settle(r.id, (fields ?? []) as Array<string | null>)) this.watch(r.id, keys[i] as string);
    });
  }

  /** After publishing `requests` with ADD_TOKEN_OPTION `token`: the ids whose add met an earlier job (and was dropped). */
  async dropped(requests: readonly RequestEnvelope[], token: string): Promise<string[]> {
    const pipeline = this.o.redis().pipeline();
    for (const r of requests) pipeline.hget(this.o.jobKey(r), 'opts');
    const rows = (await pipeline.exec()) ?? [];
    return requests.filter((_, i) => {
      const [err, opts] = rows[i] ?? [null, null];
      // Already gone (answered and trimmed meanwhile) is not a drop: the job was ours.
      return err === null && typeof opts === 'string' && addTokenOf(opts) !== token;
    }).map((r) => r.id);
  }

  /**
   * Removes the earlier jobs of `requests` that are finished and should not answer them, so the
   * adds that follow create new jobs and the requests run again: a job that asked something else
   * (its INPUT_DIGEST_OPTION is not `digests[i]`: another data set reusing the ids), one answered
   * other than `ok` (`rerun.notOk`), one answered at all (`rerun.answered`); see
   * RequestOptions.rerunNotOk / rerunAnswered. A job that is locked (picked up again meanwhile) is
   * left: check() then takes its answer, or refuses it when it asked something else.
   */
  async clearAnswered(
    requests: readonly RequestEnvelope[],
    queueOf: (request: RequestEnvelope) => Queue,
    rerun: { readonly notOk: boolean; readonly answered: boolean },
    digests: readonly string[] = [],
  ): Promise<void> {
    const pipeline = this.o.redis().pipeline();
    for (const r of requests) pipeline.hmget(this.o.jobKey(r), 'finishedOn', 'returnvalue', 'opts');
    const rows = (await pipeline.exec()) ?? [];
    const removals: Array<Promise<unknown>> = [];
    requests.forEach((r, i) => {
      const [err, fields] = rows[i] ?? [null, null];
      const [finishedOn, returnValue, opts] = (fields ?? []) as Array<string | null>;
      if (err !== null || finishedOn === null || finishedOn === undefined) return;
      // Answered (or failed for good) for other inputs: its answer is not this request's.
      if (asksOtherwise(opts, digests[i])) {
        removals.push(queueOf(r).remove(jobIdFor(r.id)));
        return;
      }
      if (returnValue === null || returnValue === undefined || !(rerun.notOk || rerun.answered)) return;
      let status: unknown;
      try {
        status = (JSON.parse(returnValue) as { status?: unknown }).status;
      } catch {
        return; // not a result: check() words that when the add meets it
      }
      if (rerun.answered || status !== 'ok') removals.push(queueOf(r).remove(jobIdFor(r.id)));
    });
    await Promise.all(removals);
  }

  /** Answers `id` from its earlier job's fields; false while that job is not finished. */
  private settle(id: string, [, finishedOn, returnValue, failedReason]: Array<string | null>): boolean {
    if (!this.o.router.isWaiting(id)) return true;
    if (returnValue !== null && returnValue !== undefined && finishedOn !== null && finishedOn !== undefined) {
      try {
        this.o.router.deliver(resultFromJson(JSON.parse(returnValue), this.o.limits));
      } catch (cause) {
        this.o.router.fail(id, new FleetError('INTERNAL', `the earlier job of request "${id}" holds a return value that is not a result (${(cause as Error).message})`, { cause }));
      }
      return true;
    }
    if (failedReason !== null && failedReason !== undefined && failedReason !== '') {
      this.o.router.fail(
        id,
        new FleetError(
          'INVALID_ARGUMENT',
          `request id "${id}" belongs to an earlier job that failed for good (${failedReason}) and is kept for a day; ` +
            'its answer went to that job\'s replyTo. Replay it from the DLQ (npu-fleet dlq replay) or publish it under a new id',
          { details: { field: 'id', id } },
        ),
      );
      return true;
    }
    return false;
  }

  private watch(id: string, key: string): void {
    this.watched.set(id, { key, id });
    this.timer ??= setInterval(() => void this.poll(), this.o.pollMs ?? EARLIER_POLL_MS);
    this.timer.unref();
  }

  private async poll(): Promise<void> {
    const list = [...this.watched.values()].filter((w) => this.o.router.isWaiting(w.id) || !this.watched.delete(w.id));
    if (list.length === 0) {
      this.close();
      return;
    }
    const pipeline = this.o.redis().pipeline();
    for (const w of list) pipeline.hmget(w.key, 'opts', 'finishedOn', 'returnvalue', 'failedReason');
    let rows: Array<[Error | null, unknown]>;
    try {
      rows = (await pipeline.exec()) ?? [];
    } catch {
      return; // Redis away for a moment: the next poll asks again; the request's timeout bounds it
    }
    list.forEach((w, i) => {
      const [err, fields] = rows[i] ?? [null, null];
      if (err === null && fields !== null && this.settle(w.id, fields as Array<string | null>)) this.watched.delete(w.id);
    });
  }

  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    this.watched.clear();
  }
}
