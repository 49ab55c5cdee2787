import { pino, type Logger, type LoggerOptions } from 'pino';

export type { Logger } from 'pino';

/**
 * Payloads (tensor bytes, message bodies, meta) are never logged: these paths are censored even if
 * a caller passes an envelope by mistake.
 */
export const REDACTED_PATHS = [
  'inputs',
  'outputs',
  'data',
  'body',
  'meta',
  '*.inputs',
  '*.outputs',
  '*.data',
  '*.body',
  '*.meta',
  'request.inputs',
  'result.outputs',
];

export interface LoggerSetup {
  level?: LoggerOptions['level'];
  /** Where logs go; default stdout. Tests pass a stream to capture lines. */
  destination?: pino.DestinationStream;
  base?: Record<string, unknown>;
}

export function createLogger(setup: LoggerSetup = {}): Logger {
  const options: LoggerOptions = {
    level: setup.level ?? process.env.NPU_FLEET_LOG_LEVEL ?? 'info',
    base: { pid: process.pid, ...setup.base },
    redact: { paths: REDACTED_PATHS, censor: '[payload]' },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return setup.destination ? pino(options, setup.destination) : pino(options);
}

/** Bounded bindings only: component/device/model (never request ids as labels of a series). */
export interface LogBindings {
  component: string;
  device?: number;
  model?: string;
}

export function childLogger(parent: Logger, bindings: LogBindings): Logger {
  return parent.child(bindings);
}
