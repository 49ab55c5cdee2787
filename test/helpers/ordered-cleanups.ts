import { afterEach } from 'vitest';

/**
 * For a test file: the returned list's cleanups run after each test, last registered first (a
 * worker goes before the broker it talks to), each given at most `boundMs` so a close stuck on a
 * service the test took away cannot hang the file; failures are ignored.
 */
export function orderedCleanups(boundMs = 15_000): Array<() => Promise<unknown>> {
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await Promise.race([c().catch(() => undefined), new Promise((r) => setTimeout(r, boundMs))]);
  });
  return cleanups;
}
