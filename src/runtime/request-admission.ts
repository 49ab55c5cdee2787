import { decodeRequest, requestFromJson } from '../codec/index.ts';
import type { CodecLimits } from '../contracts/limits.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import type { SchedulerRequest } from '../scheduler/scheduler-types.ts';
import type { Delivery, Outcome } from '../transport/transport.ts';
import type { Lane, ModelLanes } from './model-lanes.ts';
import { validateForModel, type ValidatedRequest } from './request-validation.ts';
import { identityOfRequest, type BuildResult, type ResultIdentity } from './result-builder.ts';
import { monoNowMs } from './worker-clock.ts';

/** What a queued request carries through the scheduler (opaque to it). */
export interface Payload {
  readonly request: RequestEnvelope;
  readonly delivery: Delivery;
  readonly validated: ValidatedRequest;
  /** Redeliveries of the same id that arrived while it was queued: settled with its result. */
  readonly duplicates: Rider[];
  /** When it was admitted on the monotonic clock (monoNowMs): its waits here, which a wall-clock step must not move. */
  readonly arrivedMonoMs: number;
}

/** A delivery of a request held here already: it takes that one's result, sent where its own message asked. */
export interface Rider {
  readonly delivery: Delivery;
  /** Its own message's replyTo: a retry from another client waits on its own inbox, not the first one's. */
  readonly replyTo: string | undefined;
  /** Its own message's meta, which its client correlates by. */
  readonly meta: RequestEnvelope['meta'];
}

/** One delivery's verdict at intake; the worker acts on it (metrics, results, the scheduler). */
export type Admission =
  /** Decoded, served by a loaded lane, valid for its model and still in time. */
  | { readonly kind: 'queue'; readonly lane: Lane<Payload>; readonly entry: SchedulerRequest<Payload> }
  /** Answered at once, never queued: undecodable, unknown model, invalid for it, or expired. */
  | {
      readonly kind: 'answer';
      readonly identity: ResultIdentity;
      readonly replyTo: string | undefined;
      readonly result: Omit<BuildResult, 'nowMs'>;
      readonly dlq?: Outcome['dlq'];
      /** Its deadline had passed before it reached this worker. */
      readonly expired?: boolean;
      /** The decoded request, when expired: a redelivery of a request held here rides along instead. */
      readonly request?: RequestEnvelope;
    }
  /** The worker is no longer running: another worker should take it. */
  | { readonly kind: 'release' };

/**
 * Host memory a queued request holds, for the model's byte limits: a binary frame's own bytes (its
 * tensors are views into it); for a JSON body (BullMQ) the decoded tensor bytes, a lower bound.
 */
function heldBytes(delivery: Delivery, request: RequestEnvelope): number {
  if (delivery.body instanceof Uint8Array) return delivery.body.byteLength;
  let bytes = 0;
  for (const input of request.inputs) bytes += input.data.byteLength;
  return bytes;
}

const dlqOf = (fe: FleetError): Outcome['dlq'] => ({ reason: fe.code, message: fe.message });

/**
 * Decode → lane → validation → deadline for one delivery. Every failure becomes that request's
 * own answer (an undecodable message also a DLQ record); nothing here throws or touches I/O.
 */
export interface AdmissionContext {
  readonly limits: CodecLimits;
  /** False once the worker drains or hung: decodable work goes back to the broker. */
  readonly running: boolean;
  readonly lanes: ModelLanes<Payload>;
  /** worker.maxHangsPerRequest */
  readonly maxHangsPerRequest: number;
}

export function admitDelivery(delivery: Delivery, nowMs: number, ctx: AdmissionContext, monoMs: number = monoNowMs()): Admission {
  const { limits, running, lanes } = ctx;
  let request: RequestEnvelope;
  try {
    request = delivery.body instanceof Uint8Array ? decodeRequest(delivery.body, limits) : requestFromJson(delivery.body, limits);
  } catch (err) {
    const fe = FleetError.from(err, 'INVALID_MESSAGE');
    const id = typeof fe.details.id === 'string' ? fe.details.id : '';
    const model = typeof fe.details.model === 'string' ? fe.details.model : delivery.model;
    const replyTo = typeof fe.details.replyTo === 'string' ? fe.details.replyTo : undefined;
    return { kind: 'answer', identity: { id, model }, replyTo, result: { status: 'invalid', error: fe, device: -1 }, dlq: dlqOf(fe) };
  }
  if (!running) return { kind: 'release' };
  const lane = lanes.laneFor(request.model, request.version);
  if (!lane.ok) {
    return {
      kind: 'answer',
      identity: identityOfRequest(request),
      replyTo: request.replyTo,
      result: { status: 'rejected', error: lane.error, device: -1 },
      ...(lane.error.code === 'UNKNOWN_MODEL' ? { dlq: dlqOf(lane.error) } : {}),
    };
  }
  const hangs = delivery.suspectCount ?? 0;
  if (hangs >= ctx.maxHangsPerRequest) {
    const fe = new FleetError(
      'DEVICE_HANG',
      `the device hung or its worker died ${hangs} times while this request was on it (worker.maxHangsPerRequest ${ctx.maxHangsPerRequest}); ` +
        'not run again: check its input, or raise the limit if the hangs or crashes were not its doing',
      { retriable: false, details: { hangs } },
    );
    return { kind: 'answer', identity: identityOfRequest(request), replyTo: request.replyTo, result: { status: 'failed', error: fe, device: -1 }, dlq: dlqOf(fe) };
  }
  let validated: ValidatedRequest;
  try {
    validated = validateForModel(request, lane.lane.config);
  } catch (err) {
    const fe = FleetError.from(err, 'INVALID_MESSAGE');
    return { kind: 'answer', identity: identityOfRequest(request), replyTo: request.replyTo, result: { status: 'invalid', error: fe, device: -1 }, dlq: dlqOf(fe) };
  }
  if (request.deadlineAt !== undefined && request.deadlineAt <= nowMs) {
    return {
      kind: 'answer',
      identity: identityOfRequest(request),
      replyTo: request.replyTo,
      expired: true,
      request,
      result: {
        status: 'expired',
        error: new FleetError('DEADLINE_EXCEEDED', `deadline passed ${nowMs - request.deadlineAt} ms before the request reached a worker`),
        timings: { queuedMs: nowMs - request.createdAt },
        device: -1,
      },
    };
  }
  return {
    kind: 'queue',
    lane: lane.lane,
    entry: {
      id: request.id,
      priority: validated.priority,
      items: validated.items,
      arrivedAt: nowMs,
      deadlineAt: request.deadlineAt,
      length: validated.length,
      bytes: heldBytes(delivery, request),
      // On a device that hung before: alone, so it cannot take others down again.
      alone: hangs > 0,
      streamKey: request.streamKey,
      createdAt: request.createdAt,
      payload: { request, delivery, validated, duplicates: [], arrivedMonoMs: monoMs },
    },
  };
}
