import { checkedTensorBytes, checkMetaSize, checkTensorCount } from '../codec/frame.ts';
import type { CodecLimits } from '../contracts/limits.ts';
import { RequestEnvelopeSchema, type RequestEnvelope } from '../contracts/request-envelope.ts';
import { isPlainRequest } from '../contracts/request-fast-check.ts';
import { expectedByteLength } from '../contracts/tensor.ts';
import { validationError } from '../contracts/validation-error.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { replyToProblem, type ReplyTopicPattern } from '../transport/names.ts';

/**
 * The producers' outbound edge: every request of a publish is checked before any is sent, so a
 * bad one is an error naming its field and the fix at the caller, not an `invalid` result (or,
 * with an unusable replyTo, no result at all) found later on a reply topic. Nothing of the publish
 * is sent when one request fails. The refusal's details say which request (`index`, its place in
 * `requests`) and its problem alone (`problem`: no "request [i]" before it, no "nothing was
 * published" after it), so a caller sending a data set words one line's record from them.
 */
export function checkRequests(requests: readonly RequestEnvelope[], kind: 'kafka' | 'bullmq' | 'memory', limits: CodecLimits, replyPattern?: ReplyTopicPattern): void {
  requests.forEach((request, index) => {
    const which = requests.length === 1 ? 'request' : `request [${index}]`;
    const parsed = isPlainRequest(request, 'memory') ? { success: true as const, data: request } : RequestEnvelopeSchema.safeParse(request);
    if (!parsed.success) {
      const what = `${which}${idNote(request)}`;
      const err = validationError(parsed.error, what, 'INVALID_ARGUMENT');
      // validationError words it "invalid <what>: <the issues>".
      const problem = err.message.slice(`invalid ${what}: `.length);
      throw new FleetError('INVALID_ARGUMENT', `${err.message}; nothing was published`, { cause: parsed.error, details: { ...err.details, index, problem } });
    }
    // The workers' limits (their decode refuses what is over them), checked here so an oversize
    // request fails at the caller, before it costs a broker round trip.
    try {
      checkMetaJson(parsed.data.meta, limits);
      checkTensorCount(parsed.data.inputs.length, limits, 'inputs');
      let tensorBytes = 0;
      parsed.data.inputs.forEach((t, i) => {
        checkedTensorBytes(t.dtype, t.shape, limits, `inputs[${i}]`);
        tensorBytes += t.data.byteLength;
      });
      if (tensorBytes > limits.maxMessageBytes) {
        throw new FleetError(
          'LIMIT_EXCEEDED',
          `its tensors alone are ${tensorBytes} bytes, over the message limit of ${limits.maxMessageBytes} (limits.maxMessageBytes); send fewer samples per request`,
          { details: { field: 'inputs' } },
        );
      }
    } catch (err) {
      const fe = err as FleetError;
      throw new FleetError(fe.code, `invalid ${which}${idNote(request)}: ${fe.message}; nothing was published`, { cause: err, details: { ...fe.details, index, problem: fe.message } });
    }
    parsed.data.inputs.forEach((t, i) => {
      const expected = expectedByteLength(t.dtype, t.shape);
      if (expected !== t.data.byteLength) {
        throw refuse(
          which,
          request,
          index,
          `inputs[${i}].data`,
          `inputs[${i}].data is ${t.data.byteLength} bytes but ${t.dtype} [${t.shape.join(',')}] needs ${expected ?? 'too many'}; fix dtype, shape or data`,
        );
      }
    });
    if (request.replyTo !== undefined) {
      const problem = replyToProblem(kind, request.replyTo, replyPattern);
      if (problem !== undefined) {
        throw refuse(which, request, index, 'replyTo', `replyTo ${problem}: its result could not be delivered; pick another name or leave replyTo out for {model}.replies`);
      }
    }
  });
}

/**
 * The workers' meta size limit; a meta JSON cannot hold (a BigInt, a throwing toJSON) made
 * JSON.stringify throw a TypeError, which left here as a FleetError without a code.
 */
function checkMetaJson(meta: unknown, limits: CodecLimits): void {
  try {
    checkMetaSize(meta, limits);
  } catch (err) {
    if (err instanceof FleetError) throw err;
    throw new FleetError(
      'INVALID_ARGUMENT',
      `meta cannot be sent as JSON (${(err as Error).message}); it is echoed back as JSON: keep to strings, numbers, booleans, null, arrays and objects (a BigInt as a string)`,
      { cause: err, details: { field: 'meta' } },
    );
  }
}

/**
 * subscribeReplies' edge: a name the transport cannot have a reply topic/queue of. BullMQ threw a
 * bare Error for one (after opening a Redis connection nothing closed), Kafka failed creating
 * the topic after connecting.
 */
export function checkReplyName(kind: 'kafka' | 'bullmq' | 'memory', replyTo: string): void {
  const problem = replyToProblem(kind, replyTo);
  if (problem !== undefined) {
    throw new FleetError(
      'INVALID_ARGUMENT',
      `cannot subscribe to replies on ${JSON.stringify(replyTo.slice(0, 80))}: ${problem}; pick a name the transport allows (publish refuses such a replyTo by the same rule)`,
      { details: { field: 'replyTo' } },
    );
  }
}

function idNote(request: RequestEnvelope): string {
  if (typeof request !== 'object' || request === null) return '';
  const id = (request as { id?: unknown }).id;
  return typeof id === 'string' && id.length > 0 ? ` (id ${JSON.stringify(id.slice(0, 128))})` : '';
}

function refuse(which: string, request: RequestEnvelope, index: number, field: string, message: string): FleetError {
  return new FleetError('INVALID_ARGUMENT', `invalid ${which}${idNote(request)}: ${message}; nothing was published`, {
    details: { field, index, problem: message },
  });
}
