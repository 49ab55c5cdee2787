import { closeSync, constants, fstatSync, openSync, statSync } from 'node:fs';
import { isatty } from 'node:tty';

/**
 * The signals that stop (drain) a worker or a fleet. SIGHUP is one: a terminal hangup (an ssh
 * session gone) or `kill -HUP` would otherwise end the process at once, mid-batch, and nothing
 * here reloads on it (models and config.yaml reload by polling the repository).
 */
export const STOP_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const satisfies readonly NodeJS.Signals[];

type Handler = (signal: NodeJS.Signals) => void;
const wrapped = new WeakMap<Handler, Handler>();

export function onStopSignals(handler: Handler): void {
  const w: Handler =
    wrapped.get(handler) ??
    ((signal) => {
      if (signal === 'SIGHUP') leaveHungUpTerminal();
      handler(signal);
    });
  wrapped.set(handler, w);
  for (const s of STOP_SIGNALS) process.on(s, w);
}

export function offStopSignals(handler: Handler): void {
  const w = wrapped.get(handler);
  if (w !== undefined) for (const s of STOP_SIGNALS) process.off(s, w);
}

/** A terminal that hung up: still a character device, but no longer a tty (its ioctls fail with EIO). */
function hungUp(fd: number, devNullRdev: number): boolean {
  try {
    const st = fstatSync(fd);
    return st.isCharacterDevice() && st.rdev !== devNullRdev && !isatty(fd);
  } catch {
    return false;
  }
}

/**
 * After a terminal hangup, stdout and stderr go to /dev/null. Every write to the hung-up terminal
 * fails with EIO: the first log line of the drain threw, and pino's flush at exit retried the write
 * forever, so the process never exited. Node has no dup2: fd 1 (then 2) is closed and /dev/null
 * opened, which takes the lowest free descriptor, that one.
 */
export function leaveHungUpTerminal(): void {
  let devNullRdev: number;
  try {
    devNullRdev = statSync('/dev/null').rdev;
  } catch {
    return;
  }
  for (const fd of [1, 2]) {
    if (!hungUp(fd, devNullRdev)) continue;
    closeSync(fd);
    const got = openSync('/dev/null', constants.O_WRONLY);
    // Another thread took the descriptor in between: leave it be rather than write logs into it.
    if (got !== fd) closeSync(got);
  }
}
