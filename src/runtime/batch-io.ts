import type { ModelConfig } from '../contracts/model-config.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import type { Tensor } from '../contracts/tensor.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { cutAxis, gatherBatch, scatterBatch } from '../scheduler/gather.ts';
import type { Batch } from '../scheduler/scheduler-types.ts';

/** One contiguous, padded buffer per model input, in the model's input order (one copy each). */
export function gatherInputs(
  members: readonly RequestEnvelope[],
  config: ModelConfig,
  batch: Pick<Batch<unknown>, 'gear' | 'boundLength'>,
): Array<{ data: Uint8Array; dims: number[] }> {
  return config.inputs.map((spec) => {
    const parts = members.map((r) => {
      const t = r.inputs.find((x) => x.name === spec.name);
      if (!t) throw new FleetError('INTERNAL', `validated request ${r.id} lacks input ${spec.name}`);
      return t;
    });
    const bucketed = config.buckets?.input === spec.name && batch.boundLength !== null;
    const packed = gatherBatch(parts, {
      gear: batch.gear,
      ...(bucketed ? { lengthAxis: config.buckets?.axis, boundLength: batch.boundLength ?? undefined, padValue: config.buckets?.padValue } : {}),
    });
    return { data: packed.data, dims: [...packed.shape] };
  });
}

/**
 * Splits each output back per member by sample count along its batch axis (config.yaml's first -1
 * in its dims), which holds `size / gear` slots per item: one row each for [-1, 10], 4 values each
 * for a flattened [-1] of a [batch, 4] input. Along axis 0 the tensors are views, not copies; along
 * a later one (a transposed [3, -1]) and for a bucketed model's per-position outputs (a dynamic
 * axis past the batch, cut back to each member's own length) they are copies.
 */
export function scatterOutputs(
  outputs: ReadonlyArray<{ data: Uint8Array; dims: number[] }>,
  config: ModelConfig,
  batch: Pick<Batch<{ validated: { items: number } }>, 'members' | 'gear'>,
): Tensor[][] {
  const counts = batch.members.map((m) => m.items);
  const perRequest: Tensor[][] = counts.map(() => []);
  outputs.forEach((out, j) => {
    const spec = config.outputs[j];
    if (!spec) throw new FleetError('INTERNAL', `model returned output #${j} that config.yaml does not declare`);
    // model-config refuses an output without a -1; 0 keeps a config built around it working as before.
    const batchAxis = Math.max(0, spec.dims.indexOf(-1));
    const lengthAxis = !config.buckets ? -1 : spec.dims.findIndex((d, axis) => axis > batchAxis && d === -1);
    let views;
    try {
      views = scatterBatch({ dtype: spec.dtype, shape: out.dims, data: out.data }, counts, { batchAxis, gear: batch.gear });
    } catch (err) {
      // A model whose output does not follow its config.yaml: its results cannot be told apart.
      throw new FleetError(
        'INTERNAL',
        `output ${spec.name} came back as [${out.dims.join(', ')}] from a batch of gear ${batch.gear}, which cannot be split per request along its batch axis ${batchAxis} ` +
          `(the first -1 of config.yaml dims [${spec.dims.join(', ')}]): ${(err as Error).message}`,
        { cause: err, details: { output: spec.name, dims: out.dims, gear: batch.gear } },
      );
    }
    views.forEach((v, i) => {
      const length = batch.members[i]?.length;
      const own = lengthAxis > 0 && length !== undefined ? cutAxis(v, lengthAxis, length) : v;
      perRequest[i]?.push({ name: spec.name, dtype: spec.dtype, shape: [...own.shape], data: own.data });
    });
  });
  return perRequest;
}
