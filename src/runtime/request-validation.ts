import { effectiveGears, type ModelConfig } from '../contracts/model-config.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';

export interface ValidatedRequest {
  /** Samples in the request: shape[0], equal across inputs. */
  readonly items: number;
  /** Length of the bucketed axis, when the model is bucketed. */
  readonly length: number | undefined;
  readonly priority: number;
}

function invalid(field: string, message: string): FleetError {
  return new FleetError('INVALID_MESSAGE', `${field}: ${message}`, { details: { field } });
}

/**
 * Checks a decoded request against its model's config: the envelope is already schema-valid, this
 * checks it fits the model (names, dtypes, ranks, fixed dims, bucket bounds, priority range).
 * Errors name the field and what the model expects.
 */
export function validateForModel(request: RequestEnvelope, config: ModelConfig): ValidatedRequest {
  const priority = request.priority ?? config.defaultPriority;
  if (priority >= config.priorityLevels) {
    throw invalid('priority', `is ${priority} but model ${config.name} has ${config.priorityLevels} levels (use 0..${config.priorityLevels - 1})`);
  }
  if (request.inputs.length !== config.inputs.length) {
    throw invalid(
      'inputs',
      `model ${config.name} takes ${config.inputs.length} input(s) (${config.inputs.map((i) => i.name).join(', ')}), got ${request.inputs.length}`,
    );
  }
  let items: number | undefined;
  let length: number | undefined;
  const named = new Set<string>();
  request.inputs.forEach((tensor, i) => {
    const field = `inputs[${i}]`;
    const spec = config.inputs.find((s) => s.name === tensor.name);
    if (!spec) {
      throw invalid(`${field}.name`, `"${tensor.name}" is not an input of ${config.name} (inputs: ${config.inputs.map((s) => s.name).join(', ')})`);
    }
    // The count matches, so a repeated name means another input is missing; batching looks inputs
    // up by name and would fail the whole batch on it.
    if (named.has(spec.name)) {
      const missing = config.inputs.filter((s) => !request.inputs.some((t) => t.name === s.name)).map((s) => `"${s.name}"`);
      throw invalid(`${field}.name`, `input "${spec.name}" is given twice; ${config.name} also needs ${missing.join(', ')}`);
    }
    named.add(spec.name);
    if (tensor.dtype !== spec.dtype) throw invalid(`${field}.dtype`, `input "${spec.name}" is ${spec.dtype}, got ${tensor.dtype}`);
    if (tensor.shape.length !== spec.dims.length) {
      throw invalid(`${field}.shape`, `input "${spec.name}" has rank ${spec.dims.length} (dims [${spec.dims.join(',')}]), got [${tensor.shape.join(',')}]`);
    }
    const n = tensor.shape[0] ?? 0;
    if (n < 1) throw invalid(`${field}.shape[0]`, 'must be at least 1 sample');
    if (items === undefined) items = n;
    else if (items !== n) throw invalid(`${field}.shape[0]`, `is ${n} but an earlier input has ${items} samples; all inputs need the same shape[0]`);
    const bucketAxis = config.buckets && config.buckets.input === spec.name ? config.buckets.axis : undefined;
    for (let d = 1; d < spec.dims.length; d++) {
      const want = spec.dims[d] ?? -1;
      const got = tensor.shape[d] ?? 0;
      if (d === bucketAxis) {
        const bounds = config.buckets?.bounds ?? [];
        const maxBound = bounds[bounds.length - 1] ?? 0;
        if (got < 1 || got > maxBound) {
          throw invalid(`${field}.shape[${d}]`, `length ${got} is outside 1..${maxBound} (largest bucket of ${config.name}); truncate or split the input`);
        }
        length = got;
      } else if (want !== -1 && want !== got) {
        throw invalid(`${field}.shape[${d}]`, `input "${spec.name}" needs ${want} here (dims [${spec.dims.join(',')}]), got ${got}`);
      } else if (want === -1) {
        throw invalid(`${field}.shape[${d}]`, `dynamic dimension of "${spec.name}" is only served through buckets; configure buckets for it`);
      }
    }
  });
  if (items === undefined) throw invalid('inputs', 'needs at least one tensor');
  if (items > config.maxBatchSize) {
    throw invalid('inputs[0].shape[0]', `${items} samples exceed maxBatchSize ${config.maxBatchSize} of ${config.name}; split the request`);
  }
  // A request is never split and no batch exceeds the largest gear, which may sit below maxBatchSize.
  const gears = effectiveGears(config);
  const largestGear = gears[gears.length - 1] ?? config.maxBatchSize;
  if (items > largestGear) {
    throw invalid('inputs[0].shape[0]', `${items} samples exceed the largest batch gear ${largestGear} of ${config.name} (batchGears [${gears.join(',')}]); split the request`);
  }
  return { items, length, priority };
}
