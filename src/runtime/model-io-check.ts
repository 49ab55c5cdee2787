import type { ModelConfig } from '../contracts/model-config.ts';

/** A tensor as a loaded model reports it: -1 marks a dynamic dimension. */
export interface ModelTensorSpec {
  readonly name: string;
  readonly dtype: string;
  readonly dims: readonly number[];
}

/**
 * Where config.yaml and the loaded model file disagree, one line per problem (empty: they match).
 *
 * The runtime gathers inputs and scatters outputs in config order and validates requests against
 * the config, while the binding binds tensors by position: a reordered, renamed or retyped tensor
 * would fail every batch at execute time or, worse, feed one input's bytes to another. Axis 0 is
 * the batch axis (gears) of an input; an output's is the config's first -1, which must be dynamic
 * in the model too when the model reports any. On other axes a model's fixed size must be the
 * config's too; a dynamic one accepts what the config fixes or buckets.
 */
export function modelConfigMismatches(
  config: Pick<ModelConfig, 'inputs' | 'outputs'>,
  model: { readonly inputs: readonly ModelTensorSpec[]; readonly outputs: readonly ModelTensorSpec[] },
): string[] {
  const problems: string[] = [];
  for (const [kind, declared, actual] of [
    ['inputs', config.inputs, model.inputs],
    ['outputs', config.outputs, model.outputs],
  ] as const) {
    const names = (list: readonly { name: string }[]): string => list.map((t) => t.name).join(', ');
    if (declared.map((t) => t.name).join('\u0000') !== actual.map((t) => t.name).join('\u0000')) {
      problems.push(`${kind}: config.yaml lists [${names(declared)}] but the model has [${names(actual)}] (same names, same order)`);
      continue;
    }
    declared.forEach((spec, i) => {
      const real = actual[i];
      if (real === undefined) return;
      if (spec.dtype !== real.dtype) problems.push(`${kind}[${i}] ${spec.name}: config.yaml says ${spec.dtype}, the model takes ${real.dtype}`);
      const wrongRank = spec.dims.length !== real.dims.length;
      const wrongDim = !wrongRank && real.dims.some((d, axis) => axis > 0 && d >= 0 && spec.dims[axis] !== d);
      if (wrongRank || wrongDim) {
        problems.push(`${kind}[${i}] ${spec.name}: config.yaml dims [${spec.dims.join(', ')}] do not fit the model's [${real.dims.join(', ')}] (-1: dynamic)`);
      } else if (kind === 'outputs' && spec.dims.includes(-1) && real.dims.includes(-1) && real.dims[spec.dims.indexOf(-1)] !== -1) {
        // The worker splits an output along the config's first -1; where the model keeps that
        // axis fixed, the batch lies elsewhere and results would be cut across requests. (A model
        // reporting no -1 at all, as a description holding the largest gear may, is not judged.)
        problems.push(
          `${kind}[${i}] ${spec.name}: config.yaml puts the batch (its first -1) on axis ${spec.dims.indexOf(-1)} of [${spec.dims.join(', ')}], where the model's [${real.dims.join(', ')}] is fixed: ` +
            `mark the model's batch axis, e.g. dims [${real.dims.join(', ')}]`,
        );
      }
    });
  }
  return problems;
}
