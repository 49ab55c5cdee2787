/** Random inputs shaped by a model config; variable-length inputs take their largest bucket bound. */
import type { Prng } from '../../../scripts/onnx/prng.ts';
import type { ModelConfig } from '../../../src/contracts/model-config.ts';
import { randomInput, type HostTensor } from '../ops/differential.ts';

/** Token ids of the text classifier's vocabulary (id 0 is padding). */
const TOKEN_RANGE: [number, number] = [0, 1000];

export function inputDims(config: ModelConfig, input: ModelConfig['inputs'][number], batch: number, seqLen?: number): number[] {
  return input.dims.map((d, axis) => {
    if (axis === 0) return batch;
    if (d !== -1) return d;
    const b = config.buckets;
    const bound = seqLen ?? (b && b.input === input.name && b.axis === axis ? b.bounds[b.bounds.length - 1] : undefined);
    if (bound === undefined) throw new Error(`${config.name}.${input.name}: dynamic axis ${axis} has no bucket bound`);
    return bound;
  });
}

export function exampleInputs(config: ModelConfig, batch: number, rng: Prng, seqLen?: number): HostTensor[] {
  return config.inputs.map((i) =>
    randomInput(rng, { name: i.name, dtype: i.dtype === 'int64' ? 'int64' : 'float32', dims: [] }, inputDims(config, i, batch, seqLen),
      i.dtype === 'int64' ? TOKEN_RANGE : [-1, 1]),
  );
}
