import { afterEach } from 'vitest';

interface Closable {
  close(): Promise<void>;
}

/**
 * For a test file: returns `track`, which hands back what it is given and closes it after the
 * test that made it (all at once; a failing close does not stop the others).
 */
export function closeAfterEach(): <T extends Closable>(c: T) => T {
  const open: Closable[] = [];
  afterEach(async () => {
    await Promise.allSettled(open.splice(0).map((c) => c.close()));
  });
  return (c) => {
    open.push(c);
    return c;
  };
}
