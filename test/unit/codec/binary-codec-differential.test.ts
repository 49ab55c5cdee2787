/**
 * Differential test of the binary frame codec against the implementation it replaced.
 *
 * Consumers compare frames byte for byte, so the faster encoder must write exactly the bytes the
 * previous one wrote (the header's JSON key order included), and the decoder must accept and
 * reject exactly what the previous one did, with the same errors.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import {
  decodeRequestBinary,
  decodeResultBinary,
  encodeRequestBinary,
  encodeResultBinary,
} from '../../../src/codec/binary-codec.ts';
import { CodecLimitsSchema, DEFAULT_LIMITS, type CodecLimits } from '../../../src/contracts/limits.ts';
import { RequestFrameHeaderSchema, type RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { RESULT_STATUSES, ResultFrameHeaderSchema, type ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { isPlainRequest } from '../../../src/contracts/request-fast-check.ts';
import { DTYPES, DTYPE_BYTES, type Tensor } from '../../../src/contracts/tensor.ts';
import { validationError } from '../../../src/contracts/validation-error.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { jsonSyntaxError } from '../../../src/errors/json-syntax.ts';
import {
  FRAME_MAGIC,
  FRAME_PREFIX_BYTES,
  FRAME_VERSION,
  FrameKind,
  align8,
  checkMessageSize,
  checkMetaSize,
  checkTensorCount,
  checkedTensorBytes,
  identityOf,
  invalid,
  tooBig,
} from '../../../src/codec/frame.ts';

// ─── REFERENCE COPY ────────────────────────────────────────────────────────────────────────────
// src/codec/binary-codec.ts as of commit b337568 (before the encoder/decoder speed-up), verbatim
// except that its four exported functions are renamed reference* and not exported. Do not "fix"
// or modernise it: it is the definition of the wire bytes the current codec must reproduce.

type TensorKey = 'inputs' | 'outputs';

const isPlainFrameRequest = (raw: unknown): boolean => isPlainRequest(raw, 'frame');

function encodeFrame(
  kind: FrameKind,
  /** The envelope without its tensors (they are `maybeTensors`). */
  envelope: Record<string, unknown>,
  key: TensorKey,
  maybeTensors: readonly Tensor[] | undefined,
): Buffer {
  const tensors = maybeTensors ?? [];
  // The tensors' metadata goes last in the header, the bytes after it. Appending its JSON to the
  // envelope's is ~1.5x faster than stringifying one merged object (the merge copies the envelope).
  const base = JSON.stringify(envelope);
  const json =
    maybeTensors === undefined
      ? base
      : `${base.slice(0, -1)}${base.length > 2 ? ',' : ''}"${key}":${JSON.stringify(
          maybeTensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, byteLength: t.data.byteLength })),
        )}}`;
  const headerBytes = Buffer.byteLength(json, 'utf8');
  let total = align8(FRAME_PREFIX_BYTES + headerBytes);
  for (const t of tensors) total = align8(total + t.data.byteLength);
  // One allocation, one copy of each tensor; padding bytes are zeroed so frames are deterministic.
  const out = Buffer.allocUnsafe(total);
  out.writeUInt32LE(FRAME_MAGIC, 0);
  out[4] = FRAME_VERSION;
  out[5] = kind;
  out[6] = 0;
  out[7] = 0;
  out.writeUInt32LE(headerBytes, 8);
  out.write(json, FRAME_PREFIX_BYTES, headerBytes, 'utf8');
  // Pads are under 8 bytes: a loop beats fill()'s native call.
  let offset = FRAME_PREFIX_BYTES + headerBytes;
  let aligned = align8(offset);
  while (offset < aligned) out[offset++] = 0;
  for (const t of tensors) {
    out.set(t.data, offset);
    offset += t.data.byteLength;
    aligned = align8(offset);
    while (offset < aligned) out[offset++] = 0;
  }
  return out;
}

function decodeFrame<S extends z.ZodType>(
  bytes: Uint8Array,
  expectKind: FrameKind,
  schema: S,
  key: TensorKey,
  limits: CodecLimits,
  /** A fast yes for a header zod would accept unchanged; zod judges everything else. */
  isPlain?: (raw: unknown) => boolean,
): { header: z.infer<S>; tensors: Tensor[] | undefined } {
  checkMessageSize(bytes.byteLength, limits);
  if (bytes.byteLength < FRAME_PREFIX_BYTES) {
    throw invalid(`frame is ${bytes.byteLength} bytes, shorter than its ${FRAME_PREFIX_BYTES}-byte prefix (truncated)`, '(frame)');
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint32(0, true) !== FRAME_MAGIC) throw invalid('not an npu-fleet frame (bad magic)', '(frame)');
  const version = view.getUint8(4);
  if (version !== FRAME_VERSION) {
    throw invalid(`frame version ${version} is not supported (expected ${FRAME_VERSION}); upgrade the worker or producer`, '(frame)');
  }
  const kind = view.getUint8(5);
  if (kind !== expectKind) throw invalid(`frame kind ${kind} where ${expectKind} was expected (request vs result mixed up?)`, '(frame)');
  const headerBytes = view.getUint32(8, true);
  if (headerBytes > limits.maxHeaderBytes) {
    throw tooBig(`frame header is ${headerBytes} bytes, over ${limits.maxHeaderBytes} (limits.maxHeaderBytes)`, '(header)');
  }
  if (FRAME_PREFIX_BYTES + headerBytes > bytes.byteLength) {
    throw invalid(`frame header claims ${headerBytes} bytes but only ${bytes.byteLength - FRAME_PREFIX_BYTES} remain (truncated)`, '(header)');
  }
  let raw: unknown;
  try {
    const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    raw = JSON.parse(buf.toString('utf8', FRAME_PREFIX_BYTES, FRAME_PREFIX_BYTES + headerBytes));
  } catch (err) {
    // Since the reference was taken, V8's quote of the header (meta) is dropped (json-syntax.ts).
    const cause = jsonSyntaxError(err);
    throw new FleetError('INVALID_MESSAGE', `frame header is not valid JSON: ${cause.message}`, {
      cause,
      details: { field: '(header)' },
    });
  }
  let data: z.infer<S>;
  if (isPlain?.(raw) === true) {
    data = raw as z.infer<S>;
  } else {
    const parsed = schema.safeParse(raw);
    if (!parsed.success) {
      const err = validationError(parsed.error, 'message');
      Object.assign(err.details, identityOf(raw));
      throw err;
    }
    data = parsed.data;
  }
  const header = data as Record<string, unknown>;
  try {
    checkMetaSize(header.meta, limits);
    const declared = header[key] as Array<{ name: string; dtype: Tensor['dtype']; shape: number[]; byteLength: number }> | undefined;
    const metas = declared ?? [];
    checkTensorCount(metas.length, limits, key);
    // Lay out every tensor and check the total before creating any view.
    let offset = align8(FRAME_PREFIX_BYTES + headerBytes);
    const offsets: number[] = [];
    metas.forEach((m, i) => {
      const field = `${key}[${i}]`;
      const expected = checkedTensorBytes(m.dtype, m.shape, limits, field);
      if (m.byteLength !== expected) {
        throw invalid(
          `${field}.byteLength is ${m.byteLength} but ${m.dtype} [${m.shape.join(',')}] needs ${expected}; fix dtype, shape or data`,
          `${field}.data`,
        );
      }
      offsets.push(offset);
      offset = align8(offset + expected);
    });
    const lastEnd = metas.length === 0 ? offset : (offsets[offsets.length - 1] ?? 0) + (metas[metas.length - 1]?.byteLength ?? 0);
    if (lastEnd > bytes.byteLength) {
      throw invalid(`frame is ${bytes.byteLength} bytes but its tensors need ${lastEnd} (truncated)`, `${key}`);
    }
    if (offset < bytes.byteLength) throw invalid(`frame has ${bytes.byteLength - offset} unexpected trailing bytes`, '(frame)');
    if (declared === undefined) return { header: data, tensors: undefined };
    const tensors: Tensor[] = metas.map((m, i) => ({
      name: m.name,
      dtype: m.dtype,
      shape: m.shape,
      data: bytes.subarray(offsets[i] ?? 0, (offsets[i] ?? 0) + m.byteLength),
    }));
    return { header: data, tensors };
  } catch (err) {
    if (err instanceof FleetError) Object.assign(err.details, identityOf(raw));
    throw err;
  }
}

function referenceEncodeRequestBinary(request: RequestEnvelope): Buffer {
  const { inputs, ...rest } = request;
  return encodeFrame(FrameKind.request, rest, 'inputs', inputs);
}

function referenceDecodeRequestBinary(bytes: Uint8Array, limits: CodecLimits = DEFAULT_LIMITS): RequestEnvelope {
  const { header, tensors } = decodeFrame(bytes, FrameKind.request, RequestFrameHeaderSchema, 'inputs', limits, isPlainFrameRequest);
  return { ...header, inputs: tensors ?? [] };
}

function referenceEncodeResultBinary(result: ResultEnvelope): Buffer {
  const { outputs, ...rest } = result;
  return encodeFrame(FrameKind.result, rest, 'outputs', outputs);
}

function referenceDecodeResultBinary(bytes: Uint8Array, limits: CodecLimits = DEFAULT_LIMITS): ResultEnvelope {
  const { header, tensors } = decodeFrame(bytes, FrameKind.result, ResultFrameHeaderSchema, 'outputs', limits);
  const { outputs: _omit, ...rest } = header;
  return tensors === undefined ? rest : { ...rest, outputs: tensors };
}

// ─── END OF REFERENCE COPY ─────────────────────────────────────────────────────────────────────

/** A key the generated envelope leaves out (as opposed to a key present with `undefined`). */
const ABSENT = Symbol('absent');

/** Mostly plain ASCII, sometimes what JSON must escape or UTF-8 must encode in several bytes. */
const textUnit = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(...'abcXYZ0189-_./ ') },
  {
    weight: 2,
    arbitrary: fc.constantFrom('"', '\\', '\n', '\t', '\u0000', '\u001f', '\u007f', '\u2028', 'é', 'ß', '中', '😀', '\ud800', '\udfff'),
  },
);
const text = (minLength: number, maxLength: number): fc.Arbitrary<string> => fc.string({ unit: textUnit, minLength, maxLength });
/** Ids may not hold lone surrogates (the schema refuses them: UTF-8 keys and job ids cannot carry them). */
const idText = (minLength: number, maxLength: number): fc.Arbitrary<string> => text(minLength, maxLength).map((s) => s.replace(/\p{Cs}/gu, '\ufffd'));

/** Optional fields: left out, present as undefined, or set. */
const slot = <T>(value: fc.Arbitrary<T>): fc.Arbitrary<T | undefined | typeof ABSENT> =>
  fc.oneof(fc.constant(ABSENT), fc.constant(undefined), value);

/** Finite doubles (JSON has no NaN or Infinity). */
const double = fc.double({ noNaN: true, noDefaultInfinity: true });
const millis = fc.oneof(fc.nat(5000), fc.integer({ min: 0, max: 5_000_000 }).map((x) => x / 1000), double.map(Math.abs));

const { json: jsonValue } = fc.letrec<{ json: unknown }>((tie) => ({
  json: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    text(0, 12),
    fc.integer(),
    double,
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('json'), { maxLength: 3 }),
    fc.dictionary(text(0, 6), tie('json'), { maxKeys: 3, noNullPrototype: true }),
  ),
}));
const metaArb = fc.dictionary(text(0, 8), jsonValue, { maxKeys: 4, noNullPrototype: true });

const tensorArb: fc.Arbitrary<Tensor> = fc
  .record({
    name: text(1, 16),
    dtype: fc.constantFrom(...DTYPES),
    shape: fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 1, maxLength: 4 }),
    // The bytes as a Buffer, or as a Uint8Array view at an odd offset of a larger buffer.
    placement: fc.constantFrom('buffer', 'offset-view'),
  })
  .chain(({ placement, ...meta }) => {
    const n = meta.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[meta.dtype];
    return fc.uint8Array({ minLength: n, maxLength: n }).map((bytes): Tensor => {
      if (placement === 'buffer') return { ...meta, data: Buffer.from(bytes) };
      const backing = new Uint8Array(n + 4);
      backing.set(bytes, 3);
      return { ...meta, data: backing.subarray(3, 3 + n) };
    });
  });

/** The fields in a generated key order (consumers' objects come in any order), absent ones left out. */
function inSomeOrder(fields: Record<string, unknown>): fc.Arbitrary<Record<string, unknown>> {
  const keys = Object.keys(fields);
  return fc.shuffledSubarray(keys, { minLength: keys.length, maxLength: keys.length }).map((order) => {
    const out: Record<string, unknown> = {};
    for (const k of order) if (fields[k] !== ABSENT) out[k] = fields[k];
    return out;
  });
}

const resultArb: fc.Arbitrary<ResultEnvelope> = fc
  .record({
    id: fc.oneof(fc.constant(''), idText(1, 40)),
    model: text(0, 30),
    version: fc.constantFrom('', '1', '17', 'v2-é"'),
    status: fc.constantFrom(...RESULT_STATUSES),
    error: slot(fc.record({ code: fc.constantFrom('DEVICE_ERROR', 'INVALID_MESSAGE', 'DEADLINE_EXCEEDED'), message: text(0, 60) })),
    late: slot(fc.boolean()),
    timings: fc.record({ queuedMs: millis, batchWaitMs: millis, deviceMs: millis, totalMs: millis }),
    batchSize: fc.nat(64),
    gear: fc.nat(64),
    device: fc.integer({ min: -1, max: 7 }),
    worker: text(0, 30),
    completedAt: slot(fc.integer({ min: 0, max: 4e12 })),
    meta: slot(metaArb),
    outputs: slot(fc.array(tensorArb, { maxLength: 3 })),
  })
  .chain(inSomeOrder)
  .map((r) => r as unknown as ResultEnvelope);

const requestArb: fc.Arbitrary<RequestEnvelope> = fc
  .record({
    id: idText(1, 40),
    model: fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,20}$/),
    version: slot(text(1, 10)),
    priority: slot(fc.integer({ min: 0, max: 15 })),
    deadlineAt: slot(fc.integer({ min: 0, max: 4e12 })),
    replyTo: slot(text(1, 30)),
    streamKey: slot(text(1, 20)),
    createdAt: fc.integer({ min: 0, max: 4e12 }),
    meta: slot(metaArb),
    inputs: fc.array(tensorArb, { minLength: 1, maxLength: 3 }),
  })
  .chain(inSomeOrder)
  .map((r) => r as unknown as RequestEnvelope);

const floats = (n: number): Uint8Array => new Uint8Array(Float32Array.from({ length: n }, (_, i) => i / 7).buffer);
const logits: Tensor = { name: 'logits', dtype: 'float32', shape: [1, 10], data: floats(10) };
const typicalResult: ResultEnvelope = {
  id: 'p-12345',
  model: 'mlp-classifier',
  version: '1',
  status: 'ok',
  timings: { queuedMs: 1.234, batchWaitMs: 0.512, deviceMs: 0.87, totalMs: 2.716 },
  batchSize: 32,
  gear: 32,
  device: 0,
  worker: 'device-0',
  completedAt: 1_760_000_000_000,
  outputs: [logits],
};
const typicalRequest: RequestEnvelope = {
  id: 'p-12345',
  model: 'mlp-classifier',
  priority: 1,
  createdAt: 1_760_000_000_000,
  replyTo: 'bench-replies-abcd1234',
  inputs: [{ name: 'x', dtype: 'float32', shape: [1, 64], data: floats(64) }],
};

const fixedResults: Record<string, ResultEnvelope> = {
  'typical ok': typicalResult,
  'ok, late, several outputs': {
    ...typicalResult,
    late: true,
    outputs: [logits, { name: 'ids "top-k"', dtype: 'int64', shape: [1, 3], data: new Uint8Array(24) }, { name: 'mask', dtype: 'bool', shape: [1, 0], data: new Uint8Array(0) }],
  },
  'ok, empty outputs': { ...typicalResult, outputs: [] },
  'failed with error': {
    ...typicalResult,
    status: 'failed',
    outputs: undefined,
    error: { code: 'DEVICE_ERROR', message: 'aclrtMemcpy failed: "device 0" \\ retry later' },
  },
  expired: { id: 'p-1', model: 'm', version: '', status: 'expired', timings: { queuedMs: 7, batchWaitMs: 0, deviceMs: 0, totalMs: 7 }, batchSize: 0, gear: 0, device: -1, worker: 'w' },
  'invalid, empty id': {
    id: '',
    model: '',
    version: '',
    status: 'invalid',
    error: { code: 'INVALID_MESSAGE', message: 'frame header is not valid JSON: Unexpected token \u0000' },
    timings: { queuedMs: 0, batchWaitMs: 0, deviceMs: 0, totalMs: 0 },
    batchSize: 0,
    gear: 0,
    device: -1,
    worker: 'wörker-ü',
  },
  'meta with unicode and quotes': { ...typicalResult, meta: { 'caller "x"': 'naïve café 😀 \u2028', nested: { a: [1, 'two', null, true], 'k\\': -1.5e-7 } } },
  'optional fields present but undefined': {
    ...typicalResult,
    error: undefined,
    late: undefined,
    completedAt: undefined,
    meta: undefined,
    outputs: undefined,
  },
  'outputs first, then the rest': { outputs: [logits], ...typicalResult },
  'a -0 dimension': { ...typicalResult, outputs: [{ name: 'empty', dtype: 'float32', shape: [1, -0], data: new Uint8Array(0) }] },
};

const fixedRequests: Record<string, RequestEnvelope> = {
  typical: typicalRequest,
  'every optional field': {
    ...typicalRequest,
    version: '2',
    deadlineAt: 1_760_000_001_000,
    streamKey: 'cam-"1"',
    meta: { trace: 'ü\n', n: 3 },
  },
  'optional fields present but undefined': { ...typicalRequest, version: undefined, priority: undefined, deadlineAt: undefined, meta: undefined },
  'several inputs': {
    ...typicalRequest,
    inputs: [typicalRequest.inputs[0] as Tensor, { name: 'ß-mask', dtype: 'uint8', shape: [1, 64], data: new Uint8Array(64).fill(1) }],
  },
};

/** On a mismatch, shows both headers and where the bytes part, not two long hex strings. */
function expectSameBytes(actual: Buffer, expected: Buffer): void {
  if (actual.equals(expected)) return;
  const header = (b: Buffer): string => b.toString('utf8', FRAME_PREFIX_BYTES, FRAME_PREFIX_BYTES + b.readUInt32LE(8));
  let at = 0;
  while (at < actual.length && actual[at] === expected[at]) at++;
  expect({ firstDifferentByte: at, length: actual.length, header: header(actual) }).toEqual({
    firstDifferentByte: 'none',
    length: expected.length,
    header: header(expected),
  });
}

/** A decoded value with key order kept (entries) and tensor bytes as arrays tagged with their class. */
function snapshot(value: unknown): unknown {
  if (value instanceof Uint8Array) return { [value.constructor.name]: Array.from(value) };
  if (Array.isArray(value)) return value.map(snapshot);
  if (typeof value === 'object' && value !== null) return Object.entries(value).map(([k, v]) => [k, snapshot(v)]);
  return value;
}

/** What a decoder did with the bytes: the value it returned or the error it threw. */
function outcome(decode: () => unknown): unknown {
  try {
    return { returned: snapshot(decode()) };
  } catch (err) {
    if (!(err instanceof FleetError)) return { threwNonFleetError: String(err) };
    return { threw: { code: err.code, message: err.message, retriable: err.retriable, details: err.details } };
  }
}

/**
 * The one intended difference: the tensor count is checked before the schema since the codec-fuzz
 * session (zod's issue per bad tensor ran the heap out), so a frame with too many tensors is refused
 * for that even where the reference, validating first, refused it for another field.
 */
function expectSameOutcome(actual: unknown, reference: unknown): void {
  const a = actual as { threw?: { code: string; message: string } };
  if (a.threw?.code === 'LIMIT_EXCEEDED' && /limits\.maxTensors/.test(a.threw.message) && 'threw' in (reference as object)) return;
  expect(actual).toEqual(reference);
}

/** An envelope as the decoder should give it back: no undefined keys, bytes as arrays, -0 as JSON's 0. */
function normal(value: unknown): unknown {
  if (Object.is(value, -0)) return 0;
  if (value instanceof Uint8Array) return Array.from(value);
  if (Array.isArray(value)) return value.map(normal);
  if (typeof value === 'object' && value !== null) {
    return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined).map(([k, v]) => [k, normal(v)]));
  }
  return value;
}

function checkResult(result: ResultEnvelope): void {
  const frame = encodeResultBinary(result);
  expectSameBytes(frame, referenceEncodeResultBinary(result));
  const decoded = outcome(() => decodeResultBinary(frame));
  expect(decoded).toEqual(outcome(() => referenceDecodeResultBinary(frame)));
  expect(normal(decodeResultBinary(frame))).toEqual(normal(result));
}

function checkRequest(request: RequestEnvelope): void {
  const frame = encodeRequestBinary(request);
  expectSameBytes(frame, referenceEncodeRequestBinary(request));
  const decoded = outcome(() => decodeRequestBinary(frame));
  expect(decoded).toEqual(outcome(() => referenceDecodeRequestBinary(frame)));
  expect(normal(decodeRequestBinary(frame))).toEqual(normal(request));
}

/** Tight limits so that generated frames also cross them. */
const tightLimits = CodecLimitsSchema.parse({ maxMessageBytes: 1024, maxElementsPerTensor: 24, maxMetaBytes: 64, maxHeaderBytes: 512, maxTensors: 2 });

type Damage = { kind: 'truncate'; at: number } | { kind: 'flip'; at: number; bit: number } | { kind: 'append'; bytes: Uint8Array };
const damageArb: fc.Arbitrary<Damage> = fc.oneof(
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('flip' as const), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  fc.record({ kind: fc.constant('append' as const), bytes: fc.uint8Array({ minLength: 1, maxLength: 16 }) }),
);

function damaged(frame: Buffer, damage: Damage): Buffer {
  if (damage.kind === 'truncate') return frame.subarray(0, damage.at % frame.length);
  if (damage.kind === 'append') return Buffer.concat([frame, damage.bytes]);
  const out = Buffer.from(frame);
  // Most flips land in the 12-byte prefix or the header, where the decoder has decisions to make.
  const at = damage.at % Math.min(out.length, FRAME_PREFIX_BYTES + out.readUInt32LE(8) + 8);
  out[at] = (out[at] ?? 0) ^ (1 << damage.bit);
  return out;
}

/** The same bytes as a plain Uint8Array at an odd offset of a larger ArrayBuffer. */
function asOffsetView(frame: Buffer): Uint8Array {
  const backing = new Uint8Array(frame.length + 5);
  backing.set(frame, 5);
  return backing.subarray(5);
}

describe('binary codec against its reference copy', () => {
  for (const [name, result] of Object.entries(fixedResults)) {
    it(`result "${name}": same frame bytes, same decode`, () => checkResult(result));
  }
  for (const [name, request] of Object.entries(fixedRequests)) {
    it(`request "${name}": same frame bytes, same decode`, () => checkRequest(request));
  }

  it('encodes generated results to the same bytes and decodes them the same', () => {
    fc.assert(fc.property(resultArb, checkResult), { numRuns: 1500 });
  });

  it('encodes generated requests to the same bytes and decodes them the same', () => {
    fc.assert(fc.property(requestArb, checkRequest), { numRuns: 1500 });
  });

  it('accepts and rejects damaged frames exactly as the reference does, with the same errors', () => {
    const frameArb = fc.oneof(requestArb.map(referenceEncodeRequestBinary), resultArb.map(referenceEncodeResultBinary));
    fc.assert(
      fc.property(frameArb, damageArb, fc.boolean(), fc.boolean(), (frame, damage, tight, offsetView) => {
        const damagedFrame = damaged(frame, damage);
        const bytes = offsetView ? asOffsetView(damagedFrame) : damagedFrame;
        const limits: CodecLimits = tight ? tightLimits : DEFAULT_LIMITS;
        // A request frame fed to the result decoder (and back) must fail the same way too.
        expectSameOutcome(outcome(() => decodeRequestBinary(bytes, limits)), outcome(() => referenceDecodeRequestBinary(bytes, limits)));
        expectSameOutcome(outcome(() => decodeResultBinary(bytes, limits)), outcome(() => referenceDecodeResultBinary(bytes, limits)));
      }),
      { numRuns: 3000 },
    );
  });
});
