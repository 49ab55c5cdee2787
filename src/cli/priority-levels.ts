import type { ModelConfig } from '../contracts/model-config.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { scanRepository } from '../runtime/model-repository.ts';

/**
 * A priority flag checked against the model's priority levels (refusePriorityPastLevels): past them a request waits
 * on a Kafka topic no worker reads, or in a BullMQ queue at a priority the workers do not serve.
 * Passes when the model's config is not at hand (the repository may not exist where the command
 * runs), as publish does.
 */
export function checkPriorityLevels(repository: string, model: string, priority: number, flag = 'priority'): void {
  let config: Pick<ModelConfig, 'priorityLevels'> | undefined;
  try {
    config = scanRepository(repository, { artifact: 'onnx', only: [model] }).models.get(model)?.config;
  } catch {
    config = undefined;
  }
  const n = config?.priorityLevels;
  if (n === undefined) return;
  refusePriorityPastLevels(model, n, priority, (message) => `--${flag} ${priority}: ${message}; nothing was sent`, flag);
}

/**
 * The one refusal of a priority past a model's `priorityLevels` (publish, load, frames, dlq replay):
 * `decorate` adds what the command says around it.
 */
export function refusePriorityPastLevels(model: string, levels: number, priority: number, decorate: (message: string) => string = (m) => m, field = 'priority'): void {
  if (priority < levels) return;
  throw new FleetError('INVALID_ARGUMENT', decorate(`priority must be from 0 to ${levels - 1}: model ${model} has ${levels} priority levels, got ${priority}`), {
    details: { field },
  });
}
