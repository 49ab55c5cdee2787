import { FleetError } from '../errors/fleet-error.ts';

/**
 * Refuses, before anything is sent, a request for a model outside `models` (ProducerOptions.models,
 * the fleet config's `models`): no worker would read it, a request() would wait out its whole
 * timeoutMs for nothing, and on Kafka the send would create `{model}.requests.p{priority}`. No
 * list: every model passes (the producer cannot tell a model whose workers have not started yet
 * from one no fleet serves; requests published ahead of a model's workers wait for them).
 */
export function refuseUnservedModels(requests: ReadonlyArray<{ readonly model: string }>, models: readonly string[] | undefined): void {
  if (models === undefined) return;
  requests.forEach((r, index) => {
    if (models.includes(r.model)) return;
    throw new FleetError(
      'UNKNOWN_MODEL',
      `model: "${r.model}" is not served by this fleet (not in the producer's models: ${models.join(', ') || 'none'}): no worker would read it; fix the model's name, or add it to the fleet config's models and to createProducer's models`,
      { details: { field: 'model', index, model: r.model, served: [...models] } },
    );
  });
}

/** refuseUnservedModels' error, for requestMany() (each of its promises rejects with it), or undefined. */
export function unservedRefusal(requests: ReadonlyArray<{ readonly model: string }>, models: readonly string[] | undefined): FleetError | undefined {
  try {
    refuseUnservedModels(requests, models);
    return undefined;
  } catch (err) {
    return err as FleetError;
  }
}
