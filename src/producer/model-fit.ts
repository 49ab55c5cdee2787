import { join } from 'node:path';
import type { ModelConfig } from '../contracts/model-config.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { scanRepository } from '../runtime/model-repository.ts';
import { validateForModel } from '../runtime/request-validation.ts';

/**
 * Each model's config.yaml in `repository` as this process can read it, looked up once per model
 * (a run's lines name a handful). Undefined for a model that cannot be judged here: the repository
 * is not at hand (publishing from another machine), the model is not in it, or its config.yaml is
 * not valid; nothing is thrown or said about it (the workers judge such requests, as before).
 */
export function localModelConfigs(repository: string): (model: string) => ModelConfig | undefined {
  const found = new Map<string, ModelConfig | undefined>();
  return (model) => {
    if (!found.has(model)) {
      let config: ModelConfig | undefined;
      try {
        config = scanRepository(repository, { artifact: 'onnx', only: [model] }).models.get(model)?.config;
      } catch {
        config = undefined;
      }
      found.set(model, config);
    }
    return found.get(model);
  };
}

/**
 * Refuses, before it is sent, a request its model's config would have the workers refuse as
 * `invalid` (input names, dtypes, ranks, fixed dims, bucketed lengths, samples past maxBatchSize or
 * the largest gear, priority): the workers' own check (validateForModel), run here against the
 * config at hand. Sent, such a request came back invalid without its line, and each `--resume`
 * sent it again (another dead-letter copy each time). Throws INVALID_MESSAGE, as a worker would,
 * naming the field; a model `configOf` cannot judge passes.
 */
export function modelFitCheck(configOf: (model: string) => ModelConfig | undefined, repository: string): (request: RequestEnvelope) => void {
  return (request) => {
    const config = configOf(request.model);
    if (config === undefined) return;
    try {
      validateForModel(request, config);
    } catch (err) {
      const e = FleetError.from(err, 'INVALID_MESSAGE');
      throw new FleetError(e.code, `${e.message}; not sent: ${join(repository, request.model, 'config.yaml')} refuses it, as the model's workers would`, {
        cause: err,
        details: { ...e.details, model: request.model },
      });
    }
  };
}
