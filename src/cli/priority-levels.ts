import type { ModelConfig } from '../contracts/model-config.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { scanRepository } from '../runtime/model-repository.ts';

/**
 * A priority flag checked against the model's priority levels, in the words publish uses for it
 * (publish-command.ts settlePriorities, load-command.ts commonOptions): past them a request waits
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
  if (n === undefined || priority < n) return;
  throw new FleetError('INVALID_ARGUMENT', `--${flag} ${priority}: priority must be from 0 to ${n - 1}: model ${model} has ${n} priority levels, got ${priority}; nothing was sent`, {
    details: { field: flag },
  });
}
