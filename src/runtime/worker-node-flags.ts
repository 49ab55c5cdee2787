import type { FleetConfig } from '../contracts/fleet-config.ts';

/**
 * Node/V8 flags a worker process runs with (the supervisor passes them when it spawns one).
 * Kept here so benches that host workers in their own process can run with the same ones.
 */
export function workerNodeFlags(worker: Pick<FleetConfig['worker'], 'maxSemiSpaceMb'>): string[] {
  return worker.maxSemiSpaceMb > 0 ? [`--max-semi-space-size=${worker.maxSemiSpaceMb}`] : [];
}

/**
 * The worker flags this process was not started with. `npu-fleet start` passes them; a worker
 * started on its own (one container per NPU in Kubernetes or compose) gets them only from its
 * command line or NODE_OPTIONS, and V8 reads them once, at start, so the worker can only say so.
 * A flag given with another value counts as given: that is the operator's choice.
 */
export function missingWorkerFlags(
  worker: Pick<FleetConfig['worker'], 'maxSemiSpaceMb'>,
  execArgv: readonly string[] = process.execArgv,
  nodeOptions: string = process.env.NODE_OPTIONS ?? '',
): string[] {
  const given = [...execArgv, ...nodeOptions.split(/\s+/)].map((f) => f.split('=', 1)[0]?.replace(/_/g, '-'));
  return workerNodeFlags(worker).filter((f) => !given.includes(f.split('=', 1)[0]));
}
