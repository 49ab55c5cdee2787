import type { z } from 'zod';
import { DEFAULT_LIMITS, type CodecLimits } from '../contracts/limits.ts';
import { RequestJsonSchema, type RequestEnvelope, type RequestJson } from '../contracts/request-envelope.ts';
import { ResultJsonSchema, type ResultEnvelope, type ResultJson } from '../contracts/result-envelope.ts';
import { isPlainRequest } from '../contracts/request-fast-check.ts';
import type { Tensor } from '../contracts/tensor.ts';
import { validationError } from '../contracts/validation-error.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { jsonSyntaxError } from '../errors/json-syntax.ts';
import { checkJsonStructure } from './json-structure.ts';
import { checkTensorsBeforeSchema, checkMessageSize, checkMetaKeys, checkMetaSize, checkTensorCount, checkedTensorBytes, identityOf, invalid } from './frame.ts';

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

function toBase64(data: Uint8Array): string {
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('base64');
}

/** Exact decoded length of a base64 string, computed before decoding so limits hold. */
function base64Bytes(s: string): number {
  const pad = s.endsWith('==') ? 2 : s.endsWith('=') ? 1 : 0;
  return (s.length / 4) * 3 - pad;
}

function decodeTensors(
  items: ReadonlyArray<{ name: string; dtype: Tensor['dtype']; shape: number[]; data: string }>,
  key: string,
  limits: CodecLimits,
): Tensor[] {
  checkTensorCount(items.length, limits, key);
  // Validate every tensor before decoding any of them.
  items.forEach((t, i) => {
    const field = `${key}[${i}]`;
    const expected = checkedTensorBytes(t.dtype, t.shape, limits, field);
    // The full alphabet check runs on short strings only; for long ones the post-decode length
    // check below catches bad characters (Node skips them, so the decoded length falls short),
    // except base64url's '-' and '_', which Node decodes: two native scans refuse those.
    const long = t.data.length > 4096;
    if (t.data.length % 4 !== 0 || (long ? t.data.includes('-') || t.data.includes('_') : !BASE64.test(t.data))) {
      throw invalid(`${field}.data is not valid base64 (standard alphabet, padded)`, `${field}.data`);
    }
    const got = base64Bytes(t.data);
    if (got !== expected) {
      throw invalid(
        `${field}.data holds ${got} bytes but ${t.dtype} [${t.shape.join(',')}] needs ${expected}; fix dtype, shape or data`,
        `${field}.data`,
      );
    }
  });
  return items.map((t, i) => {
    const data = Buffer.from(t.data, 'base64');
    if (data.byteLength !== base64Bytes(t.data)) {
      throw invalid(`${key}[${i}].data is not valid base64 (standard alphabet, padded)`, `${key}[${i}].data`);
    }
    return { name: t.name, dtype: t.dtype, shape: t.shape, data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) };
  });
}

function parseJsonText(input: Uint8Array | string, limits: CodecLimits): unknown {
  const byteLength = typeof input === 'string' ? Buffer.byteLength(input, 'utf8') : input.byteLength;
  checkMessageSize(byteLength, limits);
  const text = typeof input === 'string' ? input : Buffer.from(input.buffer, input.byteOffset, input.byteLength).toString('utf8');
  checkJsonStructure(text, limits);
  try {
    return JSON.parse(text);
  } catch (err) {
    // V8's message may quote the payload around the bad token; results, DLQ listings and logs carry this one.
    const cause = jsonSyntaxError(err);
    throw new FleetError('INVALID_MESSAGE', `message is neither an npu-fleet frame nor valid JSON: ${cause.message}`, {
      cause,
      details: { field: '(message)' },
    });
  }
}

function parseWith<S extends z.ZodType>(schema: S, value: unknown): z.infer<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const err = validationError(parsed.error, 'message');
    Object.assign(err.details, identityOf(value));
    throw err;
  }
  return parsed.data;
}

function withIdentity<T>(value: unknown, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof FleetError) Object.assign(err.details, identityOf(value));
    throw err;
  }
}

export function requestToJson(request: RequestEnvelope): RequestJson {
  return { ...request, inputs: request.inputs.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, data: toBase64(t.data) })) };
}

/** Decodes the JSON form from an already-parsed object (BullMQ job data). */
export function requestFromJson(value: unknown, limits: CodecLimits = DEFAULT_LIMITS): RequestEnvelope {
  withIdentity(value, () => checkTensorsBeforeSchema(value, 'inputs', limits));
  const parsed = isPlainRequest(value, 'json') ? (value as RequestJson) : parseWith(RequestJsonSchema, value);
  return withIdentity(value, () => {
    checkMetaKeys(value);
    checkMetaSize(parsed.meta, limits);
    return { ...parsed, inputs: decodeTensors(parsed.inputs, 'inputs', limits) };
  });
}

export function encodeRequestJson(request: RequestEnvelope): Buffer {
  return Buffer.from(JSON.stringify(requestToJson(request)), 'utf8');
}

export function decodeRequestJson(input: Uint8Array | string, limits: CodecLimits = DEFAULT_LIMITS): RequestEnvelope {
  return requestFromJson(parseJsonText(input, limits), limits);
}

export function resultToJson(result: ResultEnvelope): ResultJson {
  const { outputs, ...rest } = result;
  if (outputs === undefined) return rest;
  return { ...rest, outputs: outputs.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, data: toBase64(t.data) })) };
}

export function resultFromJson(value: unknown, limits: CodecLimits = DEFAULT_LIMITS): ResultEnvelope {
  withIdentity(value, () => checkTensorsBeforeSchema(value, 'outputs', limits));
  const parsed = parseWith(ResultJsonSchema, value);
  return withIdentity(value, () => {
    checkMetaKeys(value);
    checkMetaSize(parsed.meta, limits);
    const { outputs, ...rest } = parsed;
    return outputs === undefined ? rest : { ...rest, outputs: decodeTensors(outputs, 'outputs', limits) };
  });
}

export function encodeResultJson(result: ResultEnvelope): Buffer {
  return Buffer.from(JSON.stringify(resultToJson(result)), 'utf8');
}

export function decodeResultJson(input: Uint8Array | string, limits: CodecLimits = DEFAULT_LIMITS): ResultEnvelope {
  return resultFromJson(parseJsonText(input, limits), limits);
}
