import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const root = join(import.meta.dirname, '..', '..', '..');

/** The Producer API example of docs/producers.md: the block that imports npu-fleet/producer. */
function example(): string {
  const doc = readFileSync(join(root, 'docs', 'producers.md'), 'utf8');
  const block = /```ts\n(import \{[^}]*createProducer[^}]*\} from 'npu-fleet\/producer';[\s\S]*?)```/.exec(doc)?.[1];
  if (block === undefined) throw new Error("docs/producers.md has no ts block importing createProducer from 'npu-fleet/producer'");
  return block;
}

describe('docs/producers.md Producer API example', () => {
  // Inside the repository, so 'npu-fleet/producer' resolves through the package's own exports, as
  // it does for a service that depends on the package.
  mkdirSync(join(root, '.cache'), { recursive: true });
  const dir = mkdtempSync(join(root, '.cache', 'docs-example-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('type-checks against the package entry, strict', async () => {
    const file = join(dir, 'example.ts');
    writeFileSync(file, example());
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    const args = [tsc, '--noEmit', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--strict',
      '--noUncheckedIndexedAccess', '--allowImportingTsExtensions', '--skipLibCheck', '--types', 'node', file];
    const outcome = await run(process.execPath, args, { cwd: root }).then(
      () => '',
      (err: { stdout?: string; message: string }) => err.stdout ?? err.message,
    );
    expect(outcome).toBe('');
  }, 120_000);

  it('waits for the reply it subscribed for before closing the subscription', () => {
    const code = example();
    expect(code.indexOf('await s1Done')).toBeGreaterThan(code.indexOf("publish({ ...request('s1')"));
    expect(code.indexOf('await s1Done')).toBeLessThan(code.indexOf('subscription.close()'));
  });
});
