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

/**
 * Taken for a terminal that hung up: a character device other than /dev/null that is not a tty
 * (a hung-up terminal's ioctls fail with EIO, so isatty says no). Any other such device (/dev/zero,
 * /dev/kmsg) passes too: stdout redirected to one would be swapped for /dev/null by a SIGHUP.
 */
function hungUp(fd: number, devNullRdev: number): boolean {
  try {
    const st = fstatSync(fd);
    return st.isCharacterDevice() && st.rdev !== devNullRdev && !isatty(fd);
  } catch {
    return false;
  }
}

/**
 * On SIGHUP, descriptors 1 and 2, if hungUp() takes them for a hung-up terminal, are pointed at
 * /dev/null. Every write to a hung-up terminal fails with EIO: the first log line of the drain threw,
 * and pino's flush at exit retried the write forever, so the process never exited.
 *
 * What it does guarantee: the log sink (stdoutLogSink), which writes to descriptor 1 by number, no
 * longer writes to the terminal once the swap has worked. What it does not:
 * - The swap is not atomic. Node has no dup2, so the descriptor is closed and /dev/null opened,
 *   which takes the lowest free descriptor: that one, unless another thread of this process (libuv's
 *   thread pool doing file or DNS work, the addon's device threads) opened something in between. Then
 *   its own /dev/null is closed again, but the number stays with that other file or socket, and the
 *   log sink's lines (descriptor 1) go into it: appended to a file opened for writing, sent
 *   to a socket's peer; on one opened read-only (or once its opener has closed it) the write fails
 *   and the log sink stops writing for good. Nothing here detects or undoes it.
 * - process.stdout and process.stderr of a terminal usually write through a descriptor of their own
 *   (libuv reopens a tty when it wraps it), which this does not touch: their writes after the hangup still
 *   fail with EIO; the CLI's stdio guard (stdout-lines.ts) drops them rather than crash.
 * - Nothing is done when /dev/null cannot be stat'ed; an error of the close or the open is not
 *   caught (it is thrown from the SIGHUP listener), and after a failed open the descriptor stays
 *   closed.
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
    // Another thread took the number in between: our /dev/null is not at `fd`, so it is of no use.
    if (got !== fd) closeSync(got);
  }
}
