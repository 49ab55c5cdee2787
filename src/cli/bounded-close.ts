import { printLine } from './stdout-lines.ts';

/**
 * How long a CLI run (load, frames, publish --await) waits for its producer to close once its
 * outcome is printed. With the broker gone the close waits on it (BullMQ: the reply worker's close
 * and removing the inbox queue, connectTimeoutMs each, 30 s by default) and nothing is left to
 * learn, so a SIGTERM'd CI job or k8s Job would sit out its grace period and be killed; a healthy
 * close takes well under a second.
 */
export const CLI_CLOSE_BOUND_MS = 5_000;

/**
 * Awaits `closing` for at most CLI_CLOSE_BOUND_MS, or until `onSignal`'s callback is called (a
 * signal during the close), then says on stderr that it was abandoned. An abandoned close is left to
 * process exit, which drops its sockets. A close that fails still throws.
 */
export async function closeWithin(closing: Promise<void>, kind: string, onSignal?: (abandon: (signal: NodeJS.Signals) => void) => void): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const abandoned = new Promise<string>((resolve) => {
    onSignal?.((signal) => resolve(`on ${signal}`));
    timer = setTimeout(() => resolve(`after ${CLI_CLOSE_BOUND_MS / 1000} s`), CLI_CLOSE_BOUND_MS);
  });
  try {
    const why = await Promise.race([closing.then(() => undefined), abandoned]);
    if (why === undefined) return;
    closing.catch(() => undefined);
    printLine(
      `npu-fleet: closing the ${kind} producer did not finish (is the broker reachable?): abandoned ${why}; its private reply inbox may be left on the broker`,
      process.stderr,
    );
  } finally {
    clearTimeout(timer);
  }
}
