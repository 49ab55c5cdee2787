import { FleetError } from '../errors/fleet-error.ts';
import { type CodecLimits } from '../contracts/limits.ts';
import { LONE_SURROGATE, MODEL_NAME_PATTERN } from '../contracts/request-envelope.ts';
import { DTYPE_BYTES, elementCount, type Dtype } from '../contracts/tensor.ts';

/**
 * Binary frame (little-endian):
 *   0  magic "NPUF" | 4 version u8 | 5 kind u8 | 6 reserved u16 | 8 headerBytes u32
 *   12 header JSON (UTF-8) | zero padding to 8 | tensor 0 bytes | pad to 8 | tensor 1 bytes | ...
 * Tensor data starts 8-aligned within the frame, so a frame that itself starts aligned decodes into
 * typed-array views with no copy.
 */
export const FRAME_MAGIC = 0x4655504e; // "NPUF" read as u32 LE
export const FRAME_VERSION = 1;
export const FRAME_PREFIX_BYTES = 12;
export const FRAME_ALIGN = 8;

export const FrameKind = { request: 1, result: 2 } as const;
export type FrameKind = (typeof FrameKind)[keyof typeof FrameKind];

export const align8 = (n: number): number => (n + (FRAME_ALIGN - 1)) & ~(FRAME_ALIGN - 1);

export function isFrame(bytes: Uint8Array): boolean {
  return (
    bytes.byteLength >= 4 && bytes[0] === 0x4e && bytes[1] === 0x50 && bytes[2] === 0x55 && bytes[3] === 0x46
  );
}

export function invalid(message: string, field: string, extra: Record<string, unknown> = {}): FleetError {
  return new FleetError('INVALID_MESSAGE', message, { details: { field, ...extra } });
}

export function tooBig(message: string, field: string, extra: Record<string, unknown> = {}): FleetError {
  return new FleetError('LIMIT_EXCEEDED', message, { details: { field, ...extra } });
}

export function checkMessageSize(byteLength: number, limits: CodecLimits): void {
  if (byteLength > limits.maxMessageBytes) {
    throw tooBig(
      `message is ${byteLength} bytes, over the limit of ${limits.maxMessageBytes} (limits.maxMessageBytes); send fewer samples per request`,
      '(message)',
    );
  }
}

/** Checks one tensor's declared shape against limits and returns its exact byte length. */
export function checkedTensorBytes(
  dtype: Dtype,
  shape: readonly number[],
  limits: CodecLimits,
  field: string,
): number {
  const elements = elementCount(shape);
  if (elements === undefined || elements > limits.maxElementsPerTensor) {
    throw tooBig(
      `${field}.shape [${shape.join(',')}] has more than ${limits.maxElementsPerTensor} elements (limits.maxElementsPerTensor); split the request`,
      `${field}.shape`,
    );
  }
  return elements * DTYPE_BYTES[dtype];
}

/**
 * Deepest meta accepted, meta itself being level 1. Size alone did not bound it: JSON.stringify
 * recurses, so a meta nested as deep as the stack allowed at decode (≈ 4,700 arrays on Node 20,
 * once maxMetaBytes is raised to 10 KiB) passed the size check, and encoding the result echoing
 * it, deeper in the publisher's stack, threw a RangeError. Readers of the result stop earlier
 * still: serde_json at 128 levels, Python near 1,000.
 */
export const MAX_META_DEPTH = 64;

export function checkMetaSize(meta: unknown, limits: CodecLimits): void {
  if (meta === undefined) return;
  // Depth first, without recursion: past it JSON.stringify below could overflow the stack. Every
  // value takes a byte of JSON at least, so more values than maxMetaBytes is over the size too.
  const stack: Array<{ value: unknown; depth: number }> = [{ value: meta, depth: 1 }];
  let values = 0;
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    const { value, depth } = item;
    if (typeof value !== 'object' || value === null) continue;
    if (depth > MAX_META_DEPTH) {
      throw tooBig(`meta is nested ${depth} levels deep or more, over ${MAX_META_DEPTH} (readers of the echoed result stop early, serde_json at 128); flatten it`, 'meta');
    }
    for (const key in value) {
      if (++values > limits.maxMetaBytes) throw tooBig(`meta is over ${limits.maxMetaBytes} bytes as JSON (limits.maxMetaBytes); trim it`, 'meta');
      stack.push({ value: (value as Record<string, unknown>)[key], depth: depth + 1 });
    }
  }
  const bytes = Buffer.byteLength(JSON.stringify(meta), 'utf8');
  if (bytes > limits.maxMetaBytes) {
    throw tooBig(`meta is ${bytes} bytes as JSON, over ${limits.maxMetaBytes} (limits.maxMetaBytes); trim it`, 'meta');
  }
}

/**
 * Zod's record (MetaSchema) rebuilds meta key by key and skips "__proto__", whose assignment would
 * replace the new object's prototype: a meta with that key was served with it silently gone from
 * the meta echoed back. Deeper keys are safe (meta values pass through whole) and kept.
 */
export function checkMetaKeys(raw: unknown): void {
  const meta = typeof raw === 'object' && raw !== null ? (raw as Record<string, unknown>).meta : undefined;
  if (typeof meta === 'object' && meta !== null && Object.hasOwn(meta, '__proto__')) {
    throw invalid(
      'meta.__proto__: a "__proto__" key cannot be echoed back (JavaScript readers, this worker among them, drop it or take it for the prototype); rename it',
      'meta.__proto__',
    );
  }
}

export function checkTensorCount(count: number, limits: CodecLimits, field: string): void {
  if (count > limits.maxTensors) {
    throw tooBig(`${field} has ${count} tensors, over ${limits.maxTensors} (limits.maxTensors)`, field);
  }
}

/**
 * The tensor count, measured before zod sees the tensors. Zod reports one issue per bad element,
 * each with a message and a path: a 64 MiB JSON body of 5.7 million `{"name":1}` tensors made
 * 23 million issues and ran the worker out of heap (a fatal error, no catch sees it), and 5,000
 * in one frame header took 90 ms. (A shape needs no such check: ShapeSchema's max(8) ends the
 * walk over a longer one after one issue.)
 */
export function checkTensorsBeforeSchema(raw: unknown, key: 'inputs' | 'outputs', limits: CodecLimits): void {
  if (typeof raw !== 'object' || raw === null) return;
  const tensors = (raw as Record<string, unknown>)[key];
  if (Array.isArray(tensors)) checkTensorCount(tensors.length, limits, key);
}

/**
 * Best-effort identity from a parsed-but-invalid header so the invalid result can be routed. Only
 * values the envelopes allow are kept: the invalid result carries id and model, and one our own
 * result decoder refuses (an id over 128 characters or with a lone surrogate) never reaches the producer awaiting it.
 */
export function identityOf(value: unknown): Record<string, string> {
  if (typeof value !== 'object' || value === null) return {};
  const v = value as Record<string, unknown>;
  const out: Record<string, string> = {};
  if (typeof v.id === 'string' && v.id.length > 0 && v.id.length <= 128 && !LONE_SURROGATE.test(v.id)) out.id = v.id;
  if (typeof v.model === 'string' && MODEL_NAME_PATTERN.test(v.model)) out.model = v.model;
  if (typeof v.replyTo === 'string' && v.replyTo.length > 0 && v.replyTo.length <= 249) out.replyTo = v.replyTo;
  return out;
}
