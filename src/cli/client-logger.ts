import type { Logger } from 'pino';
import type { FleetConfig } from '../contracts/fleet-config.ts';
import { createLogger } from '../observability/logger.ts';

/**
 * The logger the client commands (publish, load, frames) give their producer. Without one, what
 * the producer warns of reached nobody: a private inbox queue left on Redis at close (to be removed
 * by hand), Redis or Kafka errors while it is away. On stderr, so stdout (result lines, progress
 * lines) stays machine-readable. Default level warn, not a worker's info: these commands print
 * their own progress, and the user wants the producer's trouble, not its routine.
 */
export function clientLogger(config: Pick<FleetConfig, 'log'>): Logger {
  return createLogger({ level: config.log.level ?? process.env.NPU_FLEET_LOG_LEVEL ?? 'warn', destination: process.stderr });
}
