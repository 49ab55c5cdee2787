import { cpSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadCheckModelsCommand, validateModelsCommand } from '../../../src/cli/models-command.ts';
import { main } from '../../../src/cli/main.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

describe('npu-fleet models validate', () => {
  it('passes the example repository and lists each model', () => {
    const lines: string[] = [];
    expect(validateModelsCommand('examples/models', (l) => lines.push(l))).toBe(0);
    expect(lines.filter((l) => l.startsWith('ok '))).toHaveLength(3);
    expect(lines.at(-1)).toMatch(/3 model\(s\), 0 problem\(s\)/);
  });

  it('fails with each problem named', () => {
    const dir = tempDir('npu-fleet-validate-');
    mkdirSync(join(dir, 'm', '1'), { recursive: true });
    writeFileSync(join(dir, 'm', 'config.yaml'), 'name: m\ninputs: [{name: x, dtype: float64, dims: [-1, 2]}]\noutputs: [{name: y, dtype: float32, dims: [-1]}]\n');
    const lines: string[] = [];
    expect(validateModelsCommand(dir, (l) => lines.push(l))).toBe(1);
    expect(lines.join('\n')).toMatch(/FAIL .*config.yaml: invalid model config .*inputs\[0\]\.dtype/);
  });

  it('--load loads every served version on the simulator and checks its tensors against config.yaml', async () => {
    process.env.NPU_FLEET_DEVICE = 'sim';
    const lines: string[] = [];
    expect(await loadCheckModelsCommand('examples/models', 0, (l) => lines.push(l))).toBe(0);
    expect(lines.filter((l) => /^ok {3}\S+@1: loads on sim device 0 in \d+ ms; its tensors match config\.yaml$/.test(l))).toHaveLength(3);
    expect(lines.at(-1)).toBe('3 version(s) loaded, 0 failed (artifact: model.onnx, sim device 0)');
  });

  it('--load fails a version whose file does not match config.yaml, naming both sides', async () => {
    process.env.NPU_FLEET_DEVICE = 'sim';
    const dir = tempDir('npu-fleet-validate-load-');
    cpSync('examples/models/mlp-classifier', join(dir, 'mlp-classifier'), { recursive: true });
    cpSync('examples/models/small-cnn/1/model.onnx', join(dir, 'mlp-classifier', '1', 'model.onnx'));
    const lines: string[] = [];
    expect(validateModelsCommand(dir, () => {})).toBe(0); // the static check cannot see it
    expect(await loadCheckModelsCommand(dir, 0, (l) => lines.push(l))).toBe(1);
    expect(lines[0]).toMatch(/^FAIL mlp-classifier@1: .*config\.yaml lists \[input\] but the model has \[image\]/);
    expect(lines.at(-1)).toMatch(/^0 version\(s\) loaded, 1 failed/);
  });

  it('fails an empty model file without loading it (a copy that died, a placeholder)', () => {
    const dir = tempDir('npu-fleet-validate-empty-');
    cpSync('examples/models/mlp-classifier', join(dir, 'mlp-classifier'), { recursive: true });
    writeFileSync(join(dir, 'mlp-classifier', '1', 'model.onnx'), '');
    const lines: string[] = [];
    expect(validateModelsCommand(dir, (l) => lines.push(l), 'onnx')).toBe(1);
    expect(lines).toContain(`FAIL ${join(dir, 'mlp-classifier', '1')}: model.onnx is empty (0 bytes): copy the model file in again`);
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
