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
