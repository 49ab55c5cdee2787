/**
 * The signals that stop (drain) a worker or a fleet. SIGHUP is one: a terminal hangup (an ssh
 * session gone) or `kill -HUP` would otherwise end the process at once, mid-batch, and nothing
 * here reloads on it (models and config.yaml reload by polling the repository).
 */
export const STOP_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const satisfies readonly NodeJS.Signals[];

export function onStopSignals(handler: (signal: NodeJS.Signals) => void): void {
  for (const s of STOP_SIGNALS) process.on(s, handler);
}

export function offStopSignals(handler: (signal: NodeJS.Signals) => void): void {
  for (const s of STOP_SIGNALS) process.off(s, handler);
}
