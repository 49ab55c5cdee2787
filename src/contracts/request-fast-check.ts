import { LONE_SURROGATE, MAX_PRIORITY_LEVELS, MODEL_NAME_PATTERN } from './request-envelope.ts';
import { DTYPES, MAX_TENSOR_RANK } from './tensor.ts';

/**
 * A fast yes for the plain, valid request header, in front of zod. Zod's object walk and check
 * closures cost ≈ 2–4 µs a request, the largest single piece of a worker's own per-request work
 * (decode, schedule, encode ≈ 10–20 µs). This accepts a strict subset of what the schemas accept:
 * only known keys, each plainly valid; anything else (an unknown key, `meta`, a borderline value)
 * answers false and goes to zod, which decides and words the error. The types stay the schemas'
 * `z.infer`; test/unit/contracts/request-fast-check.test.ts holds every yes here to a zod success
 * with the same output, over generated and mutated headers.
 */

/** How a tensor's bytes travel: frame header (`byteLength`), JSON (`data` base64), in memory (`data` bytes). */
export type TensorForm = 'frame' | 'json' | 'memory';

const DTYPE_SET: ReadonlySet<unknown> = new Set(DTYPES);
const MAX_EPOCH_MS = 8.64e15;

const isEpochMs = (v: unknown): boolean => Number.isSafeInteger(v) && (v as number) >= 0 && (v as number) <= MAX_EPOCH_MS;
const isText = (v: unknown, max: number): boolean => typeof v === 'string' && v.length >= 1 && v.length <= max;

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && Object.getPrototypeOf(v) === Object.prototype;
}

function isShape(v: unknown): boolean {
  if (!Array.isArray(v) || v.length < 1 || v.length > MAX_TENSOR_RANK) return false;
  for (const d of v) if (!Number.isSafeInteger(d) || (d as number) < 0) return false;
  return true;
}

function isTensor(v: unknown, form: TensorForm): boolean {
  if (!isObject(v)) return false;
  let keys = 0;
  for (const k in v) {
    keys++;
    if (k !== 'name' && k !== 'dtype' && k !== 'shape' && k !== (form === 'frame' ? 'byteLength' : 'data')) return false;
  }
  if (keys !== 4 || !isText(v.name, 128) || !DTYPE_SET.has(v.dtype) || !isShape(v.shape)) return false;
  if (form === 'frame') return Number.isSafeInteger(v.byteLength) && (v.byteLength as number) >= 0;
  return form === 'json' ? typeof v.data === 'string' : v.data instanceof Uint8Array;
}

/** True only when `raw` is a request header zod would accept unchanged (see above). */
export function isPlainRequest(raw: unknown, form: TensorForm): boolean {
  if (!isObject(raw)) return false;
  for (const k in raw) {
    switch (k) {
      case 'id':
      case 'model':
      case 'createdAt':
      case 'inputs':
        break;
      case 'version':
        if (!isText(raw.version, 64)) return false;
        break;
      case 'priority': {
        const p = raw.priority;
        if (!Number.isSafeInteger(p) || (p as number) < 0 || (p as number) >= MAX_PRIORITY_LEVELS) return false;
        break;
      }
      case 'deadlineAt':
        if (!isEpochMs(raw.deadlineAt)) return false;
        break;
      case 'replyTo':
        if (!isText(raw.replyTo, 249)) return false;
        break;
      case 'streamKey':
        if (!isText(raw.streamKey, 256)) return false;
        break;
      default:
        // `meta` (a record of anything) and unknown keys (which zod strips): zod's to judge.
        return false;
    }
  }
  if (!isText(raw.id, 128) || LONE_SURROGATE.test(raw.id as string) || typeof raw.model !== 'string' || !MODEL_NAME_PATTERN.test(raw.model) || !isEpochMs(raw.createdAt)) return false;
  const inputs = raw.inputs;
  if (!Array.isArray(inputs) || inputs.length < 1) return false;
  for (const t of inputs) if (!isTensor(t, form)) return false;
  return true;
}
