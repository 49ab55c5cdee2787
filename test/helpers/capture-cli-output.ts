import { afterEach, beforeEach, vi } from 'vitest';

/**
 * For a test file that runs the CLI in-process (main([...])): each test's stdout and stderr writes
 * land in `stdout` and `stderr` (emptied before each test, kept for its assertions), and after it
 * the real writes come back first, then `cleanup` runs, last pushed first.
 */
export function captureCliOutput(): { stdout: string[]; stderr: string[]; cleanup: Array<() => Promise<unknown> | void> } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  const cleanup: Array<() => Promise<unknown> | void> = [];
  beforeEach(() => {
    stdout.splice(0);
    stderr.splice(0);
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => (stderr.push(String(chunk)), true));
    vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => (stdout.push(String(chunk)), true));
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    for (const c of cleanup.splice(0).reverse()) await c();
  });
  return { stdout, stderr, cleanup };
}
