import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { validateModelsCommand } from '../../../src/cli/models-command.ts';
import { main } from '../../../src/cli/main.ts';

describe('npu-fleet models validate', () => {
  it('passes the example repository and lists each model', () => {
    const lines: string[] = [];
    expect(validateModelsCommand('examples/models', (l) => lines.push(l))).toBe(0);
    expect(lines.filter((l) => l.startsWith('ok '))).toHaveLength(3);
    expect(lines.at(-1)).toMatch(/3 model\(s\), 0 problem\(s\)/);
  });

  it('fails with each problem named', () => {
    const dir = mkdtempSync(join(tmpdir(), 'npu-fleet-validate-'));
    mkdirSync(join(dir, 'm', '1'), { recursive: true });
    writeFileSync(join(dir, 'm', 'config.yaml'), 'name: m\ninputs: [{name: x, dtype: float64, dims: [-1, 2]}]\noutputs: [{name: y, dtype: float32, dims: [-1]}]\n');
    const lines: string[] = [];
    expect(validateModelsCommand(dir, (l) => lines.push(l))).toBe(1);
    expect(lines.join('\n')).toMatch(/FAIL .*config.yaml: invalid model config .*inputs\[0\]\.dtype/);
  });

  it('a DIR that is not a directory is an argument error naming it', () => {
    expect(() => validateModelsCommand('/no/such/repo')).toThrow(/^\/no\/such\/repo is not a directory: give the model repository/);
  });

  it('rejects unknown commands and bad arguments with exit code 2', async () => {
    expect(await main(['frobnicate'])).toBe(2);
    expect(await main(['worker'])).toBe(2);
    expect(await main(['models', 'check'])).toBe(2);
  });
});
