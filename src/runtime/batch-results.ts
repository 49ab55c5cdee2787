import type { ModelConfig } from '../contracts/model-config.ts';
import type { Tensor } from '../contracts/tensor.ts';
import { FleetError } from '../errors/fleet-error.ts';
import type { Batch, SchedulerRequest } from '../scheduler/scheduler-types.ts';
import type { Payload } from './request-admission.ts';
import type { BuildResult } from './result-builder.ts';

/** One member's result of a batch that left the device, and its share of the device time. */
export interface MemberResult {
  readonly member: SchedulerRequest<Payload>;
  readonly result: BuildResult;
  /** Finished past its deadline or the batch's execTimeoutMs (delivered late, or dropped). */
  readonly late: boolean;
  /** Finished past its own deadline (a member without one is late only by the batch's overrun). */
  readonly missedDeadline: boolean;
  /**
   * Its share (items / gear) of the batch's execute time (0 for a failed batch): the execute alone,
   * as npu_fleet_device_execute_seconds counts it, so the wasted share of device time is one over
   * the other. Wasted when the member is late, or when its answer is withheld as superseded.
   */
  readonly deviceSeconds: number;
}

export interface FinishedBatch {
  /** Device outputs already split per member, in member order. */
  readonly perRequest: ReadonlyArray<Tensor[] | undefined>;
  readonly version: string;
  /** When the batch was dispatched, on the monotonic clock (monoNowMs): the members' waits end there. */
  readonly dispatchedMonoMs: number;
  readonly doneAt: number;
  /** Copy-in, execute and copy-out: what the result's timings report. */
  readonly deviceMs: number;
  /** The execute alone (no host/device copies): what a late member's waste is a share of. */
  readonly executeMs: number;
  /** The batch ran past execTimeoutMs: every member is late. */
  readonly overran: boolean;
}

/**
 * How long a request waited on this worker until `untilMonoMs` (monotonic, monoNowMs), e.g. its
 * batch's dispatch: the difference of two monotonic readings, which a wall-clock step between them
 * does not move (arrivedAt and dispatch times are wall clock). queuedMs, createdAt to arrivedAt,
 * stays wall clock: it compares the producer's clock with this worker's.
 */
export function waitedMs(member: SchedulerRequest<Payload>, untilMonoMs: number): number {
  return untilMonoMs - member.payload.arrivedMonoMs;
}

/**
 * Each member's result once its batch finished (DESIGN §5): `ok`, flagged `late` past its deadline
 * or the batch's execTimeoutMs, or `expired` instead when the model's policy drops late results.
 */
export function finishedBatchResults(batch: Batch<Payload>, cfg: ModelConfig, done: FinishedBatch): MemberResult[] {
  return batch.members.map((member, i) => {
    const { request } = member.payload;
    const missedDeadline = request.deadlineAt !== undefined && done.doneAt > request.deadlineAt;
    const late = done.overran || missedDeadline;
    const timings = { queuedMs: member.arrivedAt - request.createdAt, batchWaitMs: waitedMs(member, done.dispatchedMonoMs), deviceMs: done.deviceMs };
    const deviceSeconds = (done.executeMs / 1000) * (member.items / batch.gear);
    const dropped = late && cfg.lateResults === 'drop';
    const result: BuildResult = dropped
      ? { status: 'expired', error: new FleetError('DEADLINE_EXCEEDED', droppedMessage(cfg, missedDeadline ? done.doneAt - (request.deadlineAt as number) : undefined)), version: done.version, nowMs: done.doneAt, timings, batchSize: batch.items, gear: batch.gear }
      : { status: 'ok', outputs: done.perRequest[i] ?? [], late, version: done.version, nowMs: done.doneAt, timings, batchSize: batch.items, gear: batch.gear };
    return { member, late, missedDeadline, deviceSeconds, result };
  });
}

/** Why a late result was dropped: its own deadline passed (by `pastMs`), or else only its batch overran. */
function droppedMessage(cfg: ModelConfig, pastMs: number | undefined): string {
  const why = pastMs !== undefined ? `batch finished ${pastMs} ms after the request's deadline` : `batch ran past the model's execTimeoutMs ${cfg.execTimeoutMs}`;
  const fix = pastMs !== undefined ? 'lateResults: deliver returns such results flagged late' : 'raise execTimeoutMs, or lateResults: deliver returns such results flagged late';
  return `${why}; model policy lateResults=drop discards late results (${fix})`;
}

/** A device failure becomes each member's own `failed` result; the worker keeps going. */
export function failedBatchResults(batch: Batch<Payload>, version: string, error: FleetError, nowMs: number, dispatchedMonoMs: number): MemberResult[] {
  return batch.members.map((member) => {
    const { request } = member.payload;
    const timings = { queuedMs: member.arrivedAt - request.createdAt, batchWaitMs: waitedMs(member, dispatchedMonoMs) };
    return { member, late: false, missedDeadline: false, deviceSeconds: 0, result: { status: 'failed', version, error, nowMs, timings, batchSize: batch.items, gear: batch.gear } };
  });
}
