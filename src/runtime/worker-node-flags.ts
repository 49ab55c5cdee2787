import type { FleetConfig } from '../contracts/fleet-config.ts';

/**
 * Node/V8 flags a worker process runs with (the supervisor passes them when it spawns one).
 * Kept here so benches that host workers in their own process can run with the same ones.
 */
export function workerNodeFlags(worker: Pick<FleetConfig['worker'], 'maxSemiSpaceMb'>): string[] {
  return worker.maxSemiSpaceMb > 0 ? [`--max-semi-space-size=${worker.maxSemiSpaceMb}`] : [];
}
