import { DEFAULT_LIMITS, type CodecLimits } from '../contracts/limits.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { decodeRequestBinary, decodeResultBinary, encodeRequestBinary, encodeResultBinary } from './binary-codec.ts';
import { decodeRequestJson, decodeResultJson, encodeRequestJson, encodeResultJson } from './json-codec.ts';
import { isFrame } from './frame.ts';

export * from './binary-codec.ts';
export * from './json-codec.ts';
export { isFrame, FRAME_MAGIC, FRAME_VERSION } from './frame.ts';

export type WireEncoding = 'binary' | 'json';

/** Decodes either wire form: frames start with the "NPUF" magic, anything else is JSON. */
export function decodeRequest(bytes: Uint8Array, limits: CodecLimits = DEFAULT_LIMITS): RequestEnvelope {
  return isFrame(bytes) ? decodeRequestBinary(bytes, limits) : decodeRequestJson(bytes, limits);
}

export function decodeResult(bytes: Uint8Array, limits: CodecLimits = DEFAULT_LIMITS): ResultEnvelope {
  return isFrame(bytes) ? decodeResultBinary(bytes, limits) : decodeResultJson(bytes, limits);
}

export function encodeRequest(request: RequestEnvelope, encoding: WireEncoding = 'binary'): Buffer {
  return encoding === 'binary' ? encodeRequestBinary(request) : encodeRequestJson(request);
}

export function encodeResult(result: ResultEnvelope, encoding: WireEncoding = 'binary'): Buffer {
  return encoding === 'binary' ? encodeResultBinary(result) : encodeResultJson(result);
}
