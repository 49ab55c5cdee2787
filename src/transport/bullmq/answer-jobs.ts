import type { BullmqSettings } from '../../contracts/fleet-config.ts';
import { ZERO_TIMINGS, type ResultEnvelope } from '../../contracts/result-envelope.ts';
import { FleetError } from '../../errors/fleet-error.ts';
import { resultToJson } from '../../codec/index.ts';
import { renderName, replyToProblem } from '../names.ts';
import type { DlqRecord } from '../transport.ts';
import { fromBullmqPriority, jobIdFor, KEEP_COMPLETED, KEEP_FAILED } from './bullmq-names.ts';

export interface OutJob {
  readonly name: string;
  readonly data: unknown;
  readonly opts: Record<string, unknown>;
}

export interface Answer {
  readonly model: string;
  readonly result: ResultEnvelope;
  /** The result as job data (resultToJson): also the request job's return value. */
  readonly json: unknown;
  readonly replyTo?: string | undefined;
  readonly dlq?: DlqRecord | undefined;
  /** The request job answered; `createdAt` is its BullMQ timestamp (one per job, kept across redeliveries). */
  readonly source: {
    readonly queue: string;
    readonly jobId: string | undefined;
    readonly data: unknown;
    readonly priority: number | undefined;
    readonly createdAt?: number | undefined;
  };
}

/**
 * The jobs one answer publishes: the result on `replyTo` (else the model's reply queue) and, when
 * asked or when `replyTo` cannot name a queue, a DLQ record carrying the original job data and its
 * priority (for `npu-fleet dlq replay`).
 */
export function answerJobs(settings: Pick<BullmqSettings, 'repliesTemplate' | 'dlqTemplate'>, a: Answer): Array<{ queue: string; job: OutJob }> {
  const out: Array<{ queue: string; job: OutJob }> = [];
  const replyTo = a.replyTo ?? renderName(settings.repliesTemplate, a.model);
  let dlq = a.dlq;
  const problem = replyToProblem('bullmq', replyTo);
  if (problem === undefined) {
    out.push({
      queue: replyTo,
      job: {
        name: 'result',
        data: a.json,
        opts: { ...(a.result.id === '' ? {} : { jobId: replyJobId(a.result.id, a.source.createdAt) }), removeOnComplete: KEEP_COMPLETED, removeOnFail: KEEP_FAILED },
      },
    });
  } else {
    dlq ??= { reason: 'INVALID_ARGUMENT', message: `replyTo ${problem}` };
  }
  if (dlq !== undefined) {
    out.push({
      queue: renderName(settings.dlqTemplate, a.model),
      job: {
        name: 'dead-letter',
        data: { reason: dlq.reason, message: dlq.message, source: { queue: a.source.queue, jobId: a.source.jobId }, priority: a.source.priority, original: a.source.data },
        // One record per request job: BullMQ drops the add of a redelivered answer (a worker that
        // died or lost the job between writing the record and completing the job) as it does the reply's.
        opts: { ...(a.source.jobId === undefined ? {} : { jobId: dlqJobId(a.source) }), removeOnComplete: KEEP_COMPLETED, removeOnFail: KEEP_FAILED },
      },
    });
  }
  return out;
}

/** The DLQ record's job id: the request job's queue, id and timestamp (a replayed request is a new job: a record of its own). */
function dlqJobId(source: Answer['source']): string {
  return jobIdFor(`${source.queue}/${source.jobId ?? ''}${source.createdAt === undefined ? '' : `@${source.createdAt}`}`);
}

/**
 * The reply's job id: a second answer to the same request job (after a redelivery) is dropped by
 * BullMQ while the first is retained. It names the request job, not only the request id: a
 * reply queue keeps an answer longer than the request queue keeps its job (a quieter queue, the
 * 24 h reply TTL), and a later request of that id, accepted once its job is gone, would otherwise
 * be completed with its reply silently dropped. The timestamp has no '@', so ids stay distinct.
 */
export function replyJobId(requestId: string, requestCreatedAt: number | undefined): string {
  return requestCreatedAt === undefined ? jobIdFor(requestId) : `${jobIdFor(requestId)}@${requestCreatedAt}`;
}

const field = (data: unknown, key: 'id' | 'replyTo'): string | undefined => {
  const v = typeof data === 'object' && data !== null ? (data as Record<string, unknown>)[key] : undefined;
  return typeof v === 'string' ? v : undefined;
};

/**
 * The answer to a job BullMQ failed because its workers died holding it too often (see
 * StallReaper): a `failed` result (WORKER_CRASHED, not retriable: BullMQ will not run it again)
 * and a DLQ record, so the request is answered once and can be replayed.
 */
export function stalledOutAnswer(
  model: string,
  job: { readonly data: unknown; readonly stalledCounter: number; readonly queueName: string; readonly id?: string | undefined; readonly priority: number; readonly timestamp?: number },
): Answer {
  const error = new FleetError(
    'WORKER_CRASHED',
    `its worker died while holding it ${job.stalledCounter} time(s) (crash, kill or out of memory) and BullMQ gave up on it; the request is in the DLQ: replay it once the cause is fixed`,
  );
  const result: ResultEnvelope = {
    id: field(job.data, 'id') ?? '',
    model,
    version: '',
    status: 'failed',
    error: error.toResultError(),
    timings: ZERO_TIMINGS,
    batchSize: 0,
    gear: 0,
    device: -1,
    worker: 'stall-reaper',
    completedAt: Date.now(),
  };
  return {
    model,
    result,
    json: resultToJson(result),
    replyTo: field(job.data, 'replyTo'),
    dlq: { reason: error.code, message: error.message },
    source: { queue: job.queueName, jobId: job.id, data: job.data, priority: fromBullmqPriority(job.priority), createdAt: job.timestamp },
  };
}
