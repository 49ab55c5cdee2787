import { constants } from 'node:os';
import { leaveHungUpTerminal, STOP_SIGNALS } from './stop-signals.ts';

/** Set by bin/npu-fleet.js before the TypeScript loader: the first stop signal, and its handler. */
interface EarlySignals {
  signal: NodeJS.Signals | undefined;
  readonly handler: (signal: NodeJS.Signals) => void;
}

const KEY = Symbol.for('npu-fleet.early-signals');

function early(): EarlySignals | undefined {
  return (globalThis as Record<symbol, EarlySignals | undefined>)[KEY];
}

/** The stop signal received before any command handled signals, if any; the launcher's handlers stay. */
export function earlySignal(): NodeJS.Signals | undefined {
  return early()?.signal;
}

/**
 * Hands signal handling over from the launcher: call once the command's own handlers are
 * installed (so no signal falls between), and act on what it returns, a signal that came before.
 */
export function takeEarlySignal(): NodeJS.Signals | undefined {
  const e = early();
  if (e === undefined) return undefined;
  for (const s of STOP_SIGNALS) process.off(s, e.handler);
  delete (globalThis as Record<symbol, unknown>)[KEY];
  if (e.signal === 'SIGHUP') leaveHungUpTerminal();
  return e.signal;
}

/** The exit code of a process ended by `signal` as a shell reports it (128 + its number). */
export function signalExitCode(signal: NodeJS.Signals): number {
  return 128 + (constants.signals[signal] ?? 0);
}
