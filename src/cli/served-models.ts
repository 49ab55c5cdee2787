import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { FleetError } from '../errors/fleet-error.ts';

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/**
 * Why a model is not served by this fleet, or undefined when it is or cannot be judged. Known from
 * the config's `models` and, where the repository is at hand, its model directories (a client may
 * run where it is not: then any model passes). The repository is listed once, on first use.
 */
export function servedModelProblem(repository: string, models: readonly string[] | undefined): (model: string) => string | undefined {
  let inRepository: ReadonlySet<string> | null | undefined;
  const repositoryModels = (): ReadonlySet<string> | null => {
    if (inRepository === undefined) {
      try {
        // statSync, not the entry's type: a model directory may be a link (a release swapped in by renaming a link).
        inRepository = new Set(readdirSync(repository).filter((name) => !name.startsWith('.') && isDirectory(join(repository, name))));
      } catch {
        inRepository = null; // not at hand here
      }
    }
    return inRepository;
  };
  return (model) => {
    if (models !== undefined) return models.includes(model) ? undefined : `not in its config's models; served: ${models.join(', ')}`;
    const names = repositoryModels();
    return names !== null && !names.has(model) ? `not in ${repository}; served: ${[...names].sort().join(', ') || 'none'}` : undefined;
  };
}

/**
 * Refuses a model the fleet does not serve: no worker reads its queue or topic, so a request sent
 * for it waited out the whole --timeout-ms and came back failed TIMEOUT, naming neither its line
 * nor the field (and left a job nobody reads on BullMQ, a new request topic on Kafka).
 */
export function servedModelCheck(repository: string, models: readonly string[] | undefined): (model: string) => void {
  const problemOf = servedModelProblem(repository, models);
  return (model) => {
    const problem = problemOf(model);
    if (problem === undefined) return;
    throw new FleetError('UNKNOWN_MODEL', `model: "${model}" is not served by this fleet (${problem}): no worker would read it, and it would wait out --timeout-ms; fix the model's name`, {
      details: { field: 'model' },
    });
  };
}
