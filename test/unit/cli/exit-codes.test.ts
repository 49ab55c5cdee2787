import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { main } from '../../../src/cli/main.ts';

let stdout = '';
beforeEach(() => {
  stdout = '';
  vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => ((stdout += String(chunk)), true));
});
afterEach(() => vi.restoreAllMocks());

describe('exit codes in the help texts', () => {
  it('npu-fleet --help lists the one scheme of every command', async () => {
    expect(await main(['--help'])).toBe(0);
    const table = stdout.slice(stdout.indexOf('Exit codes (every command)'));
    for (const code of ['0', '1', '2', '3', '4', '130', '70', '71', '72', '75']) expect(table, `code ${code}`).toMatch(new RegExp(`^\\s+${code}\\s+\\S`, 'm'));
    expect(table).toMatch(/^\s+4\s+.*not every request/m);
    // A --file that cannot be read or an --out that cannot be created is a bad argument (nothing was done): 2, not 1.
    expect(table).toMatch(/^\s+2\s+bad arguments or config.*\n.*--out that cannot be created/m);
  });

  it('publish --help tells 4 (results not ok, lines invalid, no reply) from 1 (stopped on an error)', async () => {
    expect(await main(['publish', '--help'])).toBe(0);
    expect(stdout).toMatch(/exit 4.*(not ok|invalid)/s);
    expect(stdout).toMatch(/exit 1.*error/s);
    // As the exit table says: an --out that cannot be created is 2 (nothing was sent), not 1.
    expect(stdout).toMatch(/exit 2:[^;]*--out that\s+cannot be created/);
    expect(stdout).not.toMatch(/--out not writable/);
  });

  it('load --help and frames --help say that requests without an answer exit 4', async () => {
    for (const command of ['load', 'frames']) {
      stdout = '';
      expect(await main([command, '--help'])).toBe(0);
      expect(stdout, command).toMatch(/exit 4/);
    }
  });
});
