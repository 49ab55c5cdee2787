/**
 * Seeded mutation fuzzing of the wire codecs and the worker's inbound edge. Every input must end
 * in one of two ways: a valid envelope, within the limits, that re-encodes to the same bytes in
 * both encodings; or a FleetError with an input code whose details name a field, and whose
 * `invalid` answer (with its DLQ record) our own result decoder reads. Never another exception,
 * never more than DECODE_BUDGET_MS. CODEC_FUZZ_SEED=<n> runs another seed; a failure prints the
 * seed and iteration that rebuild its input (fuzzInput(iterationSeed(seed, i)), codec-fuzz-mutators.ts).
 */
import { isDeepStrictEqual } from 'node:util';
import { describe, expect, it } from 'vitest';
import {
  decodeRequest,
  decodeResult,
  encodeRequest,
  encodeResult,
  isFrame,
  requestFromJson,
  resultFromJson,
  type WireEncoding,
} from '../../../src/codec/index.ts';
import { CodecLimitsSchema, DEFAULT_LIMITS, type CodecLimits } from '../../../src/contracts/limits.ts';
import { ModelConfigSchema, type ModelConfig } from '../../../src/contracts/model-config.ts';
import { RequestEnvelopeSchema, type RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { ResultEnvelopeSchema, type ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { elementCount, expectedByteLength, type Tensor } from '../../../src/contracts/tensor.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { admitDelivery, type Payload } from '../../../src/runtime/request-admission.ts';
import { validateForModel } from '../../../src/runtime/request-validation.ts';
import { buildResult } from '../../../src/runtime/result-builder.ts';
import type { ModelLanes } from '../../../src/runtime/model-lanes.ts';
import type { Delivery } from '../../../src/transport/transport.ts';
import { fuzzInput, iterationSeed, type FuzzInput } from './codec-fuzz-mutators.ts';
import { SEED_INPUTS, SEED_REQUESTS, type Kind } from './codec-fuzz-seeds.ts';

const RUN_SEED = Number(process.env.CODEC_FUZZ_SEED ?? 0x5eed_2026) >>> 0;
const ITERATIONS = Number(process.env.CODEC_FUZZ_ITERATIONS ?? 24_000);
/** Per decode, whatever the input (a decode of a seed takes ≈ 20–80 µs). */
const DECODE_BUDGET_MS = 50;
const INPUT_CODES = new Set(['INVALID_MESSAGE', 'INVALID_ARGUMENT', 'LIMIT_EXCEEDED']);
/** Error text ends up in results and DLQ records: it must stay readable, whatever the input. */
const MAX_ERROR_MESSAGE = 2048;
const MAX_SCHEMA_ISSUES = 200;

/** Small limits, so that every limit is reached by mutations of the small seeds. */
const TIGHT = CodecLimitsSchema.parse({ maxMessageBytes: 16 * 1024, maxHeaderBytes: 2048, maxElementsPerTensor: 64, maxTensors: 3, maxMetaBytes: 128 });

/**
 * For the re-encoding check only: what decoded in one encoding need not fit the other's limits (a
 * JSON result's 70,000-character error message is no frame header), but it must come back the same.
 */
const ROOMY = CodecLimitsSchema.parse({ maxHeaderBytes: DEFAULT_LIMITS.maxMessageBytes });

const CONFIGS: ReadonlyMap<string, ModelConfig> = new Map(
  [
    { name: 'resnet50', inputs: [{ name: 'image', dtype: 'float32', dims: [-1, 3, 4, 4] }], outputs: [{ name: 'logits', dtype: 'float32', dims: [-1, 10] }], maxBatchSize: 8 },
    {
      name: 'bert-base',
      inputs: [
        { name: 'input_ids', dtype: 'int64', dims: [-1, 8] },
        { name: 'attention_mask', dtype: 'int64', dims: [-1, 8] },
        { name: 'token_type_ids', dtype: 'int8', dims: [-1, 8] },
      ],
      outputs: [{ name: 'pooled', dtype: 'float32', dims: [-1, 4] }],
      priorityLevels: 4,
    },
    { name: 'yolo_v8.n', inputs: [{ name: 'images', dtype: 'uint8', dims: [-1, 3, 2, 2] }], outputs: [{ name: 'boxes', dtype: 'float32', dims: [-1, 4] }], streams: { superseded: 'drop' } },
    {
      name: 'whisper.tiny',
      inputs: [
        { name: 'mel', dtype: 'float16', dims: [-1, 4, -1] },
        { name: 'lengths', dtype: 'int32', dims: [-1] },
      ],
      outputs: [{ name: 'tokens', dtype: 'int32', dims: [-1, 8] }],
      buckets: { input: 'mel', axis: 2, bounds: [6, 12] },
    },
    {
      name: 'classifier',
      inputs: [
        { name: 'mask', dtype: 'bool', dims: [-1, 1] },
        { name: 'empty', dtype: 'float32', dims: [-1, 0] },
      ],
      outputs: [{ name: 'p', dtype: 'float32', dims: [-1, 1] }],
      maxBatchSize: 4,
      priorityLevels: 16,
    },
  ].map((c) => [c.name, ModelConfigSchema.parse(c)]),
);

/** A lane table that serves nothing: admission of a decodable request ends at the lane lookup. */
const NO_LANES = {
  laneFor: () => ({ ok: false, error: new FleetError('UNKNOWN_MODEL', 'not served in this test') }),
} as unknown as ModelLanes<Payload>;

function delivery(body: Delivery['body']): Delivery {
  return { deliveryId: 'fuzz/0/1', model: 'topic-model', priority: 1, body, receivedAt: 0, redelivered: false };
}

/**
 * Tensor bytes as hex, -0 as 0 and keys sorted, so envelopes compare by what they would put on
 * the wire (as JSON text: toEqual would take -0 and 0 apart).
 */
function normal(value: unknown): unknown {
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex');
  if (Array.isArray(value)) return value.map(normal);
  if (typeof value === 'number') return value === 0 ? 0 : value;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value).filter(([, v]) => v !== undefined);
    entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return Object.fromEntries(entries.map(([k, v]) => [k, normal(v)]));
  }
  return value;
}

const same = (a: unknown, b: unknown): boolean => JSON.stringify(normal(a)) === JSON.stringify(normal(b));

class FuzzFailure extends Error {}

interface Stats {
  inputs: number;
  decodes: number;
  ok: number;
  errors: Record<string, number>;
  validated: number;
  /** JSON refused before parsing, for more structure than limits.maxHeaderBytes. */
  overStructure: number;
  slowestMs: number;
  slowest: string;
}

const newStats = (): Stats => ({ inputs: 0, decodes: 0, ok: 0, errors: {}, validated: 0, overStructure: 0, slowestMs: 0, slowest: '' });

/**
 * Runs fn and times it: the lesser of wall-clock and process CPU time, so that time spent waiting
 * for a core on a busy machine does not count; a run over budget is retried (a GC pause) before it counts.
 */
function timed<T>(fn: () => T): { value: T | undefined; error: unknown; ms: number } {
  let best = { value: undefined as T | undefined, error: undefined as unknown, ms: Infinity };
  for (let attempt = 0; attempt < 3; attempt++) {
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    let value: T | undefined;
    let error: unknown;
    try {
      value = fn();
    } catch (err) {
      error = err;
    }
    const wallMs = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const ms = Math.min(wallMs, (cpu.user + cpu.system) / 1000);
    if (ms < best.ms) best = { value, error, ms };
    if (ms < DECODE_BUDGET_MS) break;
  }
  return best;
}

function checkTensors(tensors: readonly Tensor[], limits: CodecLimits): void {
  if (tensors.length > limits.maxTensors) throw new FuzzFailure(`${tensors.length} tensors decoded, over maxTensors`);
  for (const t of tensors) {
    const n = elementCount(t.shape);
    if (n === undefined || n > limits.maxElementsPerTensor) throw new FuzzFailure(`tensor ${t.name} [${t.shape.join(',')}] over maxElementsPerTensor`);
    if (expectedByteLength(t.dtype, t.shape) !== t.data.byteLength) throw new FuzzFailure(`tensor ${t.name} holds ${t.data.byteLength} bytes for ${t.dtype} [${t.shape.join(',')}]`);
  }
}

function checkMeta(meta: unknown, limits: CodecLimits): void {
  if (meta !== undefined && Buffer.byteLength(JSON.stringify(meta), 'utf8') > limits.maxMetaBytes) throw new FuzzFailure('meta over maxMetaBytes decoded');
}

const REQUEST_FIELDS = ['id', 'model', 'version', 'priority', 'deadlineAt', 'replyTo', 'streamKey', 'createdAt', 'meta'];
const RESULT_FIELDS = ['id', 'model', 'version', 'status', 'late', 'batchSize', 'gear', 'device', 'worker', 'completedAt', 'meta'];
const NESTED: Record<string, readonly string[]> = { timings: ['queuedMs', 'batchWaitMs', 'deviceMs', 'totalMs'], error: ['code', 'message'] };
const own = (o: unknown, k: string): boolean => typeof o === 'object' && o !== null && Object.prototype.hasOwnProperty.call(o, k);

/**
 * Loses nothing: every field the envelope defines comes out as it went in (unknown keys are
 * stripped by design). `raw` is the header as JSON.parse gave it to the decoder.
 */
function checkNothingLost(kind: Kind, env: RequestEnvelope | ResultEnvelope, raw: unknown): void {
  const r = raw as Record<string, unknown>;
  const e = env as unknown as Record<string, unknown>;
  for (const k of kind === 'request' ? REQUEST_FIELDS : RESULT_FIELDS) {
    if (own(r, k) && !isDeepStrictEqual(e[k], r[k])) {
      throw new FuzzFailure(`${kind}.${k} decoded as ${JSON.stringify(e[k])?.slice(0, 200)} from ${JSON.stringify(r[k])?.slice(0, 200)}`);
    }
  }
  if (kind === 'result') {
    for (const [k, sub] of Object.entries(NESTED)) {
      for (const s of sub) {
        if (own(r[k], s) && (e[k] as Record<string, unknown>)[s] !== (r[k] as Record<string, unknown>)[s]) throw new FuzzFailure(`result.${k}.${s} changed`);
      }
    }
  }
  const tensors = kind === 'request' ? (env as RequestEnvelope).inputs : ((env as ResultEnvelope).outputs ?? []);
  const rawTensors = r[kind === 'request' ? 'inputs' : 'outputs'];
  tensors.forEach((t, i) => {
    const rt = (rawTensors as Array<Record<string, unknown>>)[i] ?? {};
    if (t.name !== rt.name || t.dtype !== rt.dtype || !isDeepStrictEqual(t.shape, rt.shape)) throw new FuzzFailure(`${kind} tensor ${i} changed`);
  });
}

/** A decoded envelope is valid, within the limits, and the same again after a trip through either encoding. */
function checkDecoded(kind: Kind, env: RequestEnvelope | ResultEnvelope, limits: CodecLimits, stats: Stats): void {
  const schema = kind === 'request' ? RequestEnvelopeSchema : ResultEnvelopeSchema;
  const parsed = schema.safeParse(env);
  if (!parsed.success) throw new FuzzFailure(`decoded ${kind} is not a valid envelope: ${parsed.error.message}`);
  if (!same(parsed.data, env)) throw new FuzzFailure(`decoded ${kind} changes under its own schema`);
  checkTensors('inputs' in env ? env.inputs : (env.outputs ?? []), limits);
  checkMeta(env.meta, limits);
  for (const encoding of ['binary', 'json'] as WireEncoding[]) {
    const encode = (e: typeof env): Buffer => (kind === 'request' ? encodeRequest(e as RequestEnvelope, encoding) : encodeResult(e as ResultEnvelope, encoding));
    const decode = (b: Buffer): typeof env => (kind === 'request' ? decodeRequest(b, ROOMY) : decodeResult(b, ROOMY));
    const once = encode(env);
    const again = decode(once);
    if (!same(again, env)) throw new FuzzFailure(`${kind} changed through ${encoding}: ${JSON.stringify(normal(env)).slice(0, 300)}`);
    if (!encode(again).equals(once)) throw new FuzzFailure(`${kind} re-encodes differently in ${encoding}`);
  }
  if (kind === 'request') {
    const request = env as RequestEnvelope;
    const config = CONFIGS.get(request.model) ?? (CONFIGS.get('resnet50') as ModelConfig);
    try {
      validateForModel(request, config);
      stats.validated++;
    } catch (err) {
      checkError(err, 'validateForModel');
    }
  }
}

function checkError(err: unknown, where: string): FleetError {
  if (err instanceof FuzzFailure) throw err;
  if (!(err instanceof FleetError)) {
    throw new FuzzFailure(`${where} threw ${(err as Error)?.name ?? typeof err}: ${String((err as Error)?.message ?? err).slice(0, 300)}, not a FleetError`);
  }
  if (!INPUT_CODES.has(err.code)) throw new FuzzFailure(`${where} threw FleetError ${err.code}, not an input error code: ${err.message.slice(0, 300)}`);
  const field = err.details.field;
  if (typeof field !== 'string' || field.length === 0) throw new FuzzFailure(`${where}: ${err.code} names no field: ${err.message.slice(0, 300)}`);
  if (err.message.length === 0 || err.message.length > MAX_ERROR_MESSAGE) throw new FuzzFailure(`${where}: error message of ${err.message.length} characters`);
  // Schema issues beyond the ten listed are counted in the message: their number is the work behind
  // it, which the limits must bound (16 tensors of a handful of fields each, and the top level).
  const more = /; and (\d+) more$/.exec(err.message);
  if (more && Number(more[1]) > MAX_SCHEMA_ISSUES) throw new FuzzFailure(`${where}: the schema found ${Number(more[1]) + 10} issues: ${err.message.slice(0, 200)}`);
  return err;
}

/** The worker's answer to an undecodable request: invalid, a DLQ record, and a result the producer can read. */
function checkAdmission(body: Delivery['body'], limits: CodecLimits, decodeError: FleetError | undefined): void {
  let a: ReturnType<typeof admitDelivery>;
  try {
    a = admitDelivery(delivery(body), 1_000, { limits, running: true, lanes: NO_LANES, maxHangsPerRequest: 3 });
  } catch (err) {
    throw new FuzzFailure(`admitDelivery threw ${(err as Error).name}: ${(err as Error).message}`);
  }
  if (decodeError === undefined) return;
  if (a.kind !== 'answer' || a.result.status !== 'invalid') throw new FuzzFailure(`an undecodable request was admitted as ${a.kind}`);
  if (a.dlq?.reason !== decodeError.code) throw new FuzzFailure(`an invalid request got DLQ record ${JSON.stringify(a.dlq)}`);
  const result = buildResult(a.identity, { worker: 'w', device: 0 }, { ...a.result, nowMs: 2_000 });
  for (const encoding of ['binary', 'json'] as const) {
    let back: ResultEnvelope;
    try {
      back = decodeResult(encodeResult(result, encoding));
    } catch (err) {
      throw new FuzzFailure(`the invalid result (${JSON.stringify(a.identity).slice(0, 200)}) does not decode as ${encoding}: ${(err as Error).message.slice(0, 300)}`);
    }
    if (back.status !== 'invalid' || back.error?.code !== decodeError.code) throw new FuzzFailure('the invalid result lost its status or code');
  }
}

function checkOne(
  kind: Kind,
  decode: () => RequestEnvelope | ResultEnvelope,
  raw: () => unknown,
  where: string,
  limits: CodecLimits,
  stats: Stats,
): FleetError | undefined {
  const { value, error, ms } = timed(decode);
  stats.decodes++;
  if (ms > stats.slowestMs) {
    stats.slowestMs = ms;
    stats.slowest = where;
  }
  if (ms >= DECODE_BUDGET_MS) throw new FuzzFailure(`${where} took ${ms.toFixed(1)} ms (budget ${DECODE_BUDGET_MS} ms)`);
  if (error === undefined) {
    stats.ok++;
    checkNothingLost(kind, value as RequestEnvelope | ResultEnvelope, raw());
    checkDecoded(kind, value as RequestEnvelope | ResultEnvelope, limits, stats);
    return undefined;
  }
  const fe = checkError(error, where);
  stats.errors[fe.code] = (stats.errors[fe.code] ?? 0) + 1;
  return fe;
}

/** All the ways the bytes reach a decoder: as a request and as a result, as bytes and (BullMQ) as parsed JSON. */
function checkInput(input: FuzzInput, limits: CodecLimits, stats: Stats): void {
  stats.inputs++;
  const { bytes } = input;
  const header = (): unknown => JSON.parse(isFrame(bytes) ? bytes.toString('utf8', 12, 12 + bytes.readUInt32LE(8)) : bytes.toString('utf8'));
  const requestError = checkOne('request', () => decodeRequest(bytes, limits), header, 'decodeRequest', limits, stats);
  checkAdmission(bytes, limits, requestError);
  checkOne('result', () => decodeResult(bytes, limits), header, 'decodeResult', limits, stats);
  if (input.form !== 'json' || bytes.byteLength > 1024 * 1024) return;
  let job: unknown;
  try {
    job = JSON.parse(bytes.toString('utf8'));
  } catch {
    return;
  }
  // The structure bound, counted another way (a regex drops the strings): refused exactly when over it.
  const structure = structureOf(bytes.toString('utf8'));
  const refused = requestError?.code === 'LIMIT_EXCEEDED' && /limits\.maxHeaderBytes/.test(requestError.message);
  if (bytes.byteLength <= limits.maxMessageBytes && structure > limits.maxHeaderBytes !== refused) {
    throw new FuzzFailure(`JSON of ${structure} brackets, commas and colons was ${refused ? '' : 'not '}refused for its structure (bound ${limits.maxHeaderBytes})`);
  }
  if (refused) stats.overStructure++;
  const fromJobError = checkOne('request', () => requestFromJson(job, limits), () => job, 'requestFromJson', limits, stats);
  // Admission takes the same decoder as the line above; one job in four is enough to hold it to it.
  if (stats.inputs % 4 === 0 && typeof job === 'object' && job !== null && !Array.isArray(job)) {
    checkAdmission(job as Record<string, unknown>, limits, fromJobError);
  }
  checkOne('result', () => resultFromJson(job, limits), () => job, 'resultFromJson', limits, stats);
}

/** The brackets, commas and colons outside strings of valid JSON text. */
function structureOf(text: string): number {
  return text.replace(/"(?:[^"\\]|\\.)*"/g, '').replace(/[^[{,:]/g, '').length;
}

function describeInput(input: FuzzInput): string {
  const text = input.bytes.subarray(0, 600).toString('latin1').replace(/[^\x20-\x7e]/g, '.');
  return `${input.recipe}; ${input.bytes.byteLength} bytes, starting ${JSON.stringify(text)}`;
}

function run(label: string, count: number, limits: CodecLimits, stats: Stats, salt: number): void {
  for (let i = 0; i < count; i++) {
    const seed = iterationSeed(RUN_SEED ^ salt, i);
    const input = fuzzInput(seed);
    try {
      checkInput(input, limits, stats);
    } catch (err) {
      const what = err instanceof FuzzFailure ? err.message : `the check itself threw ${(err as Error).stack}`;
      throw new Error(
        `${label}: CODEC_FUZZ_SEED=${RUN_SEED} iteration ${i} (input = fuzzInput(${seed})): ${what}\n  input: ${describeInput(input)}`,
        { cause: err },
      );
    }
  }
}

describe('codec fuzzing (seeded mutations)', () => {
  it('the seed corpus decodes, validates for its model and re-encodes identically', () => {
    const stats = newStats();
    for (const input of SEED_INPUTS) {
      const decode = input.kind === 'request' ? () => decodeRequest(input.bytes) : () => decodeResult(input.bytes);
      const header = (): unknown => JSON.parse(input.form === 'frame' ? input.bytes.toString('utf8', 12, 12 + input.bytes.readUInt32LE(8)) : input.bytes.toString('utf8'));
      expect(checkOne(input.kind, decode, header, input.kind, DEFAULT_LIMITS, stats)).toBeUndefined();
    }
    expect(stats.validated).toBe(SEED_REQUESTS.length * 2);
  });

  it.each([
    ['default limits', DEFAULT_LIMITS, 0],
    ['tight limits', TIGHT, 0x7157],
  ] as const)(`%s: ${ITERATIONS / 2} mutated inputs each end in a re-encodable envelope or a FleetError naming a field`, (label, limits, salt) => {
    const stats = newStats();
    const started = performance.now();
    run(label, ITERATIONS / 2, limits, stats, salt);
    const elapsedMs = performance.now() - started;
    console.log(
      `codec fuzz (${label}, seed ${RUN_SEED}): ${stats.inputs} inputs, ${stats.decodes} decodes in ${(elapsedMs / 1000).toFixed(1)} s; ` +
        `${stats.ok} decoded (${stats.validated} valid for their model), errors ${JSON.stringify(stats.errors)} (${stats.overStructure} JSON over the structure bound); slowest ${stats.slowestMs.toFixed(1)} ms (${stats.slowest})`,
    );
    // Not vacuous: both outcomes, and every error code the limits produce, were reached.
    expect(stats.ok).toBeGreaterThan(ITERATIONS / 20);
    expect(stats.validated).toBeGreaterThan(ITERATIONS / 100);
    expect(stats.errors.INVALID_MESSAGE ?? 0).toBeGreaterThan(ITERATIONS / 4);
    expect(stats.errors.LIMIT_EXCEEDED ?? 0).toBeGreaterThan(ITERATIONS / 200);
    expect(stats.overStructure).toBeGreaterThan(0);
  });

  it('every truncation of every seed, and every bit flip of every frame prefix, ends in a FleetError naming a field', () => {
    const stats = newStats();
    for (const [n, seed] of SEED_INPUTS.entries()) {
      const cases: Buffer[] = [];
      for (let len = 0; len < seed.bytes.byteLength; len++) cases.push(seed.bytes.subarray(0, len));
      if (seed.form === 'frame') {
        for (let bit = 0; bit < 12 * 8; bit++) {
          const flipped = Buffer.from(seed.bytes);
          flipped[bit >> 3] = (flipped[bit >> 3] ?? 0) ^ (1 << (bit & 7));
          cases.push(flipped);
        }
      }
      for (const [i, bytes] of cases.entries()) {
        const input: FuzzInput = { ...seed, bytes, recipe: `seed ${n} case ${i}` };
        try {
          checkInput(input, DEFAULT_LIMITS, stats);
        } catch (err) {
          throw new Error(`${(err as Error).message}\n  input: ${describeInput(input)}`, { cause: err });
        }
      }
    }
    // A truncated frame or JSON text never decodes; a flipped reserved bit of a frame does.
    expect(stats.errors.INVALID_MESSAGE ?? 0).toBeGreaterThan(stats.inputs);
    console.log(`codec fuzz (truncations and prefix bit flips): ${stats.inputs} inputs, ${stats.decodes} decodes, ${stats.ok} decoded, slowest ${stats.slowestMs.toFixed(1)} ms`);
  });
});
