import { FleetError } from '../errors/fleet-error.ts';
import { elementBytes } from './acl-dtype.ts';
import type { ExecuteInput, LoadModelOptions, LoadedModel } from './device.ts';

const MAX_GEARS = 128; // ACL_MAX_BATCH_NUM
const MAX_RANK = 128; // ACL_MAX_DIM_CNT

function invalid(message: string, details: Record<string, unknown> = {}): FleetError {
  return new FleetError('INVALID_ARGUMENT', message, { details });
}

function isPositiveInt(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n > 0;
}

export function validateLoadOptions(
  path: string,
  opts: LoadModelOptions,
): { gears: number[]; maxInputDims: Record<string, number[]>; maxOutputDims: Record<string, number[]>; slots: 1 | 2 } {
  if (typeof path !== 'string' || path.length === 0) throw invalid('loadModel: path must be a non-empty string');
  const gears = opts.gears ?? [];
  if (!Array.isArray(gears) || gears.length > MAX_GEARS || !gears.every(isPositiveInt)) {
    throw invalid(`loadModel: gears must be at most ${MAX_GEARS} positive integers, got ${JSON.stringify(gears)}`, { gears });
  }
  const dimsMap = (option: string, given: Record<string, number[]> | undefined): Record<string, number[]> => {
    const out: Record<string, number[]> = {};
    for (const [name, dims] of Object.entries(given ?? {})) {
      if (!Array.isArray(dims) || dims.length === 0 || dims.length > MAX_RANK || !dims.every(isPositiveInt)) {
        throw invalid(`loadModel: ${option}.${name} must be a non-empty array of positive integers, got ${JSON.stringify(dims)}`, { name });
      }
      // The buffers are sized from these bounds: an element count past 2^53 cannot be a real
      // buffer, and in C++ (size_t) it would wrap around to a small one.
      if (!Number.isSafeInteger(dims.reduce((n, d) => n * d, 1))) {
        throw invalid(`loadModel: ${option}.${name} ${JSON.stringify(dims)} has more elements than any device buffer can hold`, { name });
      }
      out[name] = [...dims];
    }
    return out;
  };
  const maxInputDims = dimsMap('maxInputDims', opts.maxInputDims);
  const maxOutputDims = dimsMap('maxOutputDims', opts.maxOutputDims);
  const slots = opts.slots ?? 2;
  if (slots !== 1 && slots !== 2) throw invalid(`loadModel: slots must be 1 or 2, got ${String(slots)}`);
  return { gears: [...new Set(gears)].sort((a, b) => a - b), maxInputDims, maxOutputDims, slots };
}

/**
 * Checks a batch against the model before it reaches C++: input count, dims rank and values,
 * byte lengths (dims × dtype size), gear membership. The binding re-checks only what guards
 * memory safety.
 */
export function validateExecuteInputs(model: Pick<LoadedModel, 'inputs' | 'gears' | 'dynamic' | 'maxInputDims'>, inputs: ExecuteInput[], gear: number, timeoutMs: number | undefined): void {
  if (!model.gears.includes(gear)) {
    throw invalid(`execute: gear ${String(gear)} is not one of the model's gears [${model.gears.join(', ')}]`, { gear, gears: model.gears });
  }
  if (timeoutMs !== undefined && !(typeof timeoutMs === 'number' && timeoutMs >= 0 && Number.isFinite(timeoutMs))) {
    throw invalid(`execute: timeoutMs must be a finite number >= 0, got ${String(timeoutMs)}`);
  }
  if (!Array.isArray(inputs) || inputs.length !== model.inputs.length) {
    throw invalid(`execute: the model takes ${model.inputs.length} input(s) (${model.inputs.map((t) => t.name).join(', ')}), got ${Array.isArray(inputs) ? inputs.length : typeof inputs}`);
  }
  model.inputs.forEach((spec, i) => {
    const input = inputs[i];
    const maxDims = model.maxInputDims[i] ?? spec.dims;
    if (input === undefined || !(input.data instanceof Uint8Array)) throw invalid(`execute: input ${spec.name} needs data as a Uint8Array/Buffer`, { input: spec.name });
    const { dims } = input;
    if (!Array.isArray(dims) || dims.length !== spec.dims.length) {
      throw invalid(`execute: input ${spec.name} must have rank ${spec.dims.length} (model dims [${spec.dims.join(', ')}]), got ${JSON.stringify(dims)}`, { input: spec.name });
    }
    dims.forEach((d, k) => {
      const declared = spec.dims[k] ?? -1;
      const bound = maxDims[k] ?? declared;
      const ok =
        Number.isSafeInteger(d) && d >= 0 && (declared >= 0 ? d === declared : d <= bound) && (k !== 0 || model.dynamic === 'static' || declared >= 0 || d === gear);
      if (!ok) {
        throw invalid(
          `execute: input ${spec.name} dims ${JSON.stringify(dims)} do not fit the model's [${spec.dims.join(', ')}]` +
            (k === 0 && declared < 0 ? ` at gear ${gear} (the batch dimension must equal the gear)` : ` (dimension ${k} must be ${declared >= 0 ? String(declared) : `<= ${bound}`})`),
          { input: spec.name, dims },
        );
      }
    });
    const expectedBytes = dims.reduce((n, d) => n * d, 1) * elementBytes(spec.dtype);
    if (input.data.byteLength !== expectedBytes) {
      throw invalid(
        `execute: input ${spec.name} has ${input.data.byteLength} bytes, dims [${dims.join(', ')}] × ${spec.dtype} need ${expectedBytes}`,
        { input: spec.name, byteLength: input.data.byteLength, expectedBytes },
      );
    }
  });
}
