import { encodeResult, isFrame, type WireEncoding } from '../codec/index.ts';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { CONTENT_TYPES } from './names.ts';

/**
 * Byte-level transports (Kafka, memory) answer in the encoding the request came in: a binary
 * frame gets a binary result, JSON (curl-level tools) gets JSON. Undecodable garbage gets binary.
 */
export function replyEncodingFor(body: Uint8Array | Record<string, unknown>): WireEncoding {
  if (body instanceof Uint8Array) return isFrame(body) || !looksLikeJson(body) ? 'binary' : 'json';
  return 'json';
}

function looksLikeJson(bytes: Uint8Array): boolean {
  for (const b of bytes) {
    if (b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09) continue;
    return b === 0x7b; // '{'
  }
  return false;
}

export function encodeResultFor(
  body: Uint8Array | Record<string, unknown>,
  result: ResultEnvelope,
): { bytes: Buffer; contentType: string } {
  const encoding = replyEncodingFor(body);
  return {
    bytes: encodeResult(result, encoding),
    contentType: encoding === 'binary' ? CONTENT_TYPES.resultFrame : CONTENT_TYPES.resultJson,
  };
}

export function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
