import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import type { ResultEnvelope, ResultStatus, Timings } from '../contracts/result-envelope.ts';
import type { Tensor } from '../contracts/tensor.ts';
import type { FleetError } from '../errors/fleet-error.ts';

/** Identity of a request for its result; partial when the message could not be decoded. */
export interface ResultIdentity {
  id: string;
  model: string;
  createdAt?: number | undefined;
  meta?: Record<string, unknown> | undefined;
}

export interface ResultContext {
  worker: string;
  device: number;
}

export function identityOfRequest(r: RequestEnvelope): ResultIdentity {
  return { id: r.id, model: r.model, createdAt: r.createdAt, meta: r.meta };
}

export interface BuildResult {
  status: ResultStatus;
  version?: string;
  error?: FleetError;
  outputs?: Tensor[];
  late?: boolean;
  timings?: Partial<Timings>;
  batchSize?: number;
  gear?: number;
  device?: number;
  nowMs: number;
}

/** Timings to the microsecond: finer digits are noise, and 17-digit floats cost to print. */
const ms = (v: number | undefined): number => Math.round(Math.max(0, v ?? 0) * 1000) / 1000;

export function buildResult(identity: ResultIdentity, ctx: ResultContext, b: BuildResult): ResultEnvelope {
  const queuedMs = ms(b.timings?.queuedMs);
  const batchWaitMs = ms(b.timings?.batchWaitMs);
  const deviceMs = ms(b.timings?.deviceMs);
  // At least the parts: a producer clock ahead of the worker's (createdAt in the future) cuts the
  // span from createdAt, down to 0, though the request spent its wait and device time here; and
  // deviceMs (the device's own float timings) can exceed the whole-ms host clock's span.
  const totalMs = identity.createdAt === undefined ? 0 : Math.max(ms(b.nowMs - identity.createdAt), ms(queuedMs + batchWaitMs + deviceMs));
  const result: ResultEnvelope = {
    id: identity.id,
    model: identity.model,
    version: b.version ?? '',
    status: b.status,
    timings: { queuedMs, batchWaitMs, deviceMs, totalMs },
    batchSize: b.batchSize ?? 0,
    gear: b.gear ?? 0,
    device: b.device ?? ctx.device,
    worker: ctx.worker,
    completedAt: b.nowMs,
  };
  if (b.error) result.error = b.error.toResultError();
  if (b.outputs) result.outputs = b.outputs;
  if (b.late) result.late = true;
  if (identity.meta !== undefined) result.meta = identity.meta;
  return result;
}
