import type { ModelConfig } from '../contracts/model-config.ts';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import type { FleetMetrics } from '../observability/metrics.ts';
import type { Logger } from '../observability/logger.ts';
import type { SchedulerRequest } from '../scheduler/scheduler-types.ts';
import { supersededError } from '../scheduler/validate-request.ts';
import type { Delivery, Outcome, Transport } from '../transport/transport.ts';
import { waitedMs, type MemberResult } from './batch-results.ts';
import { FrameOrderedSettle } from './frame-ordered-settle.ts';
import { OutcomePublisher } from './outcome-publisher.ts';
import type { Payload, Rider } from './request-admission.ts';
import { buildResult, identityOfRequest, type BuildResult, type ResultContext, type ResultIdentity } from './result-builder.ts';
import { monoNowMs } from './worker-clock.ts';

export interface AnswererOptions {
  readonly transport: Transport;
  readonly metrics: FleetMetrics;
  readonly log: Logger;
  readonly publishLingerMs: number;
  readonly ctx: ResultContext;
  /** Whether the worker serves `model`: only such names are metric labels (see onSettled). */
  readonly serves: (model: string) => boolean;
  /** Request `id` is answered (RequestIntake.answered). */
  readonly answered: (id: string, delivery: Delivery, nowMs: number) => void;
}

/**
 * A device worker's answers (DESIGN §3-§5): every delivery, whatever became of it, gets one
 * result, published with its duplicates through an OutcomePublisher; the result metrics are
 * counted once the broker has settled it, as only then is the end-to-end latency known.
 * JS thread only.
 */
export class Answerer {
  private readonly publisher: OutcomePublisher;
  /** Stream frames' ok results checked against the fleet's newest answered frame (BullMQ). */
  private readonly frameOrder: FrameOrderedSettle;
  /** Results of messages without a createdAt: no end-to-end latency to observe when settled. */
  private readonly noCreatedAt = new WeakSet<ResultEnvelope>();
  /** Deadlines of results that left the device in time, to tell a miss at publish when settled. */
  private readonly dueAt = new WeakMap<ResultEnvelope, number>();
  /** Device seconds of checked frames' ok results: wasted if the check refuses them when settled. */
  private readonly frameDeviceSeconds = new WeakMap<ResultEnvelope, number>();

  constructor(private readonly o: AnswererOptions) {
    this.frameOrder = new FrameOrderedSettle(o.transport);
    const settles = this.frameOrder.checks ? { settle: this.frameOrder.settle.bind(this.frameOrder) } : o.transport;
    this.publisher = new OutcomePublisher(settles, o.log, o.publishLingerMs, 500, (outcomes, settledAt) =>
      this.onSettled(outcomes, settledAt),
    );
  }

  /** Requests the scheduler gave up on before execution: their deadlines passed in the queue. */
  answerExpired(expired: readonly SchedulerRequest<Payload>[], nowMs: number): void {
    for (const r of expired) {
      const { request, delivery } = r.payload;
      this.o.metrics.deadlineMiss(request.model, 'queue');
      this.answer(delivery, identityOfRequest(request), request.replyTo, {
        status: 'expired',
        error: new FleetError('DEADLINE_EXCEEDED', 'deadline could not be met before execution; not sent to the device'),
        nowMs,
        timings: { queuedMs: r.arrivedAt - request.createdAt, batchWaitMs: waitedMs(r, monoNowMs()) },
        device: -1,
      }, undefined, r.payload.duplicates, r.priority);
    }
  }

  /**
   * Requests that left the queue because `by`, a newer frame of their stream, arrived (model
   * streams.superseded: drop): rejected without device time, with their riding duplicates.
   */
  answerSuperseded(superseded: readonly SchedulerRequest<Payload>[], by: SchedulerRequest<Payload>, nowMs: number): void {
    for (const r of superseded) {
      const { request, delivery, duplicates } = r.payload;
      this.answer(delivery, identityOfRequest(request), request.replyTo, {
        status: 'rejected',
        error: supersededError(r, by),
        nowMs,
        timings: { queuedMs: r.arrivedAt - request.createdAt, batchWaitMs: waitedMs(r, monoNowMs()) },
        device: -1,
      }, undefined, duplicates, r.priority);
    }
  }

  /** A batch's results, member by member (BatchRunner's `results`). */
  answerBatch(cfg: ModelConfig, results: readonly MemberResult[]): void {
    for (const { member, result, late, missedDeadline, deviceSeconds } of results) {
      const { request, delivery, duplicates } = member.payload;
      const checked = this.frameOrder.checks && result.status === 'ok' && cfg.streams.superseded === 'drop' && member.streamKey !== undefined && member.createdAt !== undefined;
      if (checked) {
        const frame = { model: cfg.name, requestId: request.id, streamKey: member.streamKey as string, frameAt: member.createdAt as number };
        for (const d of [delivery, ...duplicates.map((dup) => dup.delivery)]) this.frameOrder.note(d, frame);
      }
      if (missedDeadline) this.o.metrics.deadlineMiss(cfg.name, 'device');
      if (late) this.o.metrics.addWastedDeviceSeconds(cfg.name, cfg.lateResults === 'drop' ? 'expired' : 'late', deviceSeconds);
      const sent = this.answer(delivery, identityOfRequest(request), request.replyTo, result, undefined, duplicates, member.priority);
      // A late one is counted as such already; its answer withheld as well is not wasted twice.
      if (checked && !late) this.frameDeviceSeconds.set(sent, deviceSeconds);
      // In time off the device: whether it also reaches the broker in time is known when settled.
      if (request.deadlineAt !== undefined && !missedDeadline && result.status === 'ok') this.dueAt.set(sent, request.deadlineAt);
    }
  }

  answer(
    delivery: Delivery,
    identity: ResultIdentity,
    replyTo: string | undefined,
    b: BuildResult,
    dlq?: Outcome['dlq'],
    duplicates: readonly Rider[] = [],
    priority?: number,
  ): ResultEnvelope {
    const result = buildResult(identity, this.o.ctx, b);
    // Every request that waited in the local queue, whatever became of it: served, expired there
    // or failed with its batch (under overload the expired ones are the long waits).
    if (b.timings?.batchWaitMs !== undefined) {
      this.o.metrics.observeQueueWait(identity.model, priority ?? 0, b.timings.batchWaitMs / 1000);
    }
    // No createdAt (an undecodable message): its result's totalMs is 0, not a latency.
    if (identity.createdAt === undefined) this.noCreatedAt.add(result);
    if (identity.id) this.o.answered(identity.id, delivery, b.nowMs);
    this.publisher.push({ delivery, result, replyTo, dlq });
    for (const dup of duplicates) this.publisher.push({ delivery: dup.delivery, result: withMeta(result, dup.meta), replyTo: dup.replyTo });
    return result;
  }

  /** Settles what is still being published (drain). */
  close(): Promise<void> {
    return this.publisher.close();
  }

  private onSettled(outcomes: readonly Outcome[], settledAt: number): void {
    for (const o of outcomes) {
      // A frame the order check refused went out rejected: counted so (settles pass the originals).
      const result = this.frameOrder.answeredAs(o.result);
      const status = result.status === 'ok' && result.late ? 'late' : result.status;
      const createdAt = this.noCreatedAt.has(o.result) ? undefined : o.result.completedAt !== undefined ? o.result.completedAt - o.result.timings.totalMs : settledAt;
      // A message can name any model (unknown, or undecodable with a 256-character name): as a
      // label that would be a new series per name. The topic/queue it came from is one we subscribe to.
      const model = this.o.serves(o.result.model) ? o.result.model : o.delivery.model;
      const e2eSeconds = createdAt === undefined ? undefined : Math.max(0, settledAt - createdAt) / 1000;
      this.o.metrics.observeResult(model, status, e2eSeconds, o.delivery.priority, result.error?.code);
      const dueAt = this.dueAt.get(o.result);
      if (dueAt !== undefined) {
        this.dueAt.delete(o.result); // once per request, not per duplicate delivery
        if (settledAt > dueAt && result === o.result) this.o.metrics.deadlineMiss(model, 'publish');
      }
      // Only a transport that checks frame order refuses after the device (BullMQ): no lookup else.
      const deviceSeconds = this.frameOrder.checks ? this.frameDeviceSeconds.get(o.result) : undefined;
      if (deviceSeconds !== undefined) {
        this.frameDeviceSeconds.delete(o.result); // once per request, like dueAt
        if (result !== o.result) this.o.metrics.addWastedDeviceSeconds(model, 'superseded', deviceSeconds);
      }
      if (o.dlq) this.o.metrics.deadLettered(model, o.dlq.reason);
    }
  }
}

/** A rider's copy of the shared result, carrying its own message's meta (the same object when that is the same). */
function withMeta(result: ResultEnvelope, meta: ResultEnvelope['meta']): ResultEnvelope {
  if (meta === result.meta) return result;
  const { meta: _shared, ...rest } = result;
  return meta === undefined ? rest : { ...rest, meta };
}
