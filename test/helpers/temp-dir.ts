import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

const made: string[] = [];
const removeAll = (): void => {
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
};

// Registered when a test file imports this module: its directories go when the file's tests are
// done. Vitest ends its worker processes without an 'exit' event, so that alone would not do;
// a plain child process (test/native/support/exit-child.ts) has no runner and relies on 'exit'.
try {
  afterAll(removeAll);
} catch {
  process.once('exit', removeAll);
}

/**
 * A fresh directory under the OS temp dir, removed after the importing test file (or at process
 * exit outside vitest), so repeated `npm test` runs leave nothing behind. The e2e harness keeps
 * its fleet logs on purpose.
 */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.push(dir);
  return dir;
}
