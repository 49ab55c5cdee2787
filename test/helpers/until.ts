/** Polls `cond` every `pollMs` until it holds; throws naming `what` after `ms`. */
export async function until(cond: () => boolean, ms: number, what: string, pollMs = 50): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, pollMs));
  }
}

/** Whether process `pid` still exists (signal 0 checks without sending anything). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Polls the async `probe` every `pollMs` until it resolves true; a probe that throws (a server
 * down or frozen mid-drill) counts as not yet. Throws naming `what` after `timeoutMs`.
 */
export async function untilProbe(what: string, probe: () => Promise<boolean>, timeoutMs: number, pollMs = 100): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, pollMs));
  }
}
