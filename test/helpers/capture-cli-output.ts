import { afterEach, beforeEach, vi } from 'vitest';

/**
 * For a test file that runs the CLI in-process (main([...])): each test's stderr writes land in
 * `stderr` (emptied before each test, kept for its assertions), its stdout writes are dropped, and
 * after it the real writes come back first, then `cleanup` runs, last pushed first.
 */
export function captureCliOutput(): { stderr: string[]; cleanup: Array<() => Promise<unknown> | void> } {
  const stderr: string[] = [];
  const cleanup: Array<() => Promise<unknown> | void> = [];
  beforeEach(() => {
    stderr.splice(0);
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => (stderr.push(String(chunk)), true));
    vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    for (const c of cleanup.splice(0).reverse()) await c();
  });
  return { stderr, cleanup };
}
