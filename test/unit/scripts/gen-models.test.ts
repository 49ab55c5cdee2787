import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { DEFAULT_MODELS_DIR, generateModels } from '../../../scripts/gen-models.ts';
import { ModelConfigSchema } from '../../../src/contracts/model-config.ts';

const tmp = mkdtempSync(join(tmpdir(), 'gen-models-'));
const cleanup = [tmp];
afterAll(() => cleanup.forEach((d) => rmSync(d, { recursive: true, force: true })));

function listFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => relative(dir, join(e.parentPath, e.name)))
    .sort();
}

describe('scripts/gen-models.ts', () => {
  const written = generateModels(tmp);

  it('writes a README, config.yaml and 1/model.onnx for the three example models', () => {
    expect(written.map((f) => relative(tmp, f)).sort()).toEqual([
      'README.md',
      'mlp-classifier/1/model.onnx',
      'mlp-classifier/config.yaml',
      'small-cnn/1/model.onnx',
      'small-cnn/config.yaml',
      'text-classifier/1/model.onnx',
      'text-classifier/config.yaml',
    ]);
  });

  it('reproduces the committed examples/models byte for byte', () => {
    const committed = listFiles(DEFAULT_MODELS_DIR);
    expect(committed).toEqual(listFiles(tmp));
    for (const f of committed) {
      expect(readFileSync(join(tmp, f)).equals(readFileSync(join(DEFAULT_MODELS_DIR, f))), f).toBe(true);
    }
  });

  it('runs as a CLI into a given directory (npm run gen:models -- <dir>)', () => {
    const out = mkdtempSync(join(tmpdir(), 'gen-models-cli-'));
    cleanup.push(out);
    const r = spawnSync(process.execPath, ['--import', 'tsx', join(DEFAULT_MODELS_DIR, '..', '..', 'scripts', 'gen-models.ts'), out], {
      encoding: 'utf8',
    });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout.trim().split('\n')).toHaveLength(7);
    expect(listFiles(out)).toEqual(listFiles(DEFAULT_MODELS_DIR));
    expect(readFileSync(join(out, 'small-cnn', '1', 'model.onnx')).equals(readFileSync(join(DEFAULT_MODELS_DIR, 'small-cnn', '1', 'model.onnx')))).toBe(true);
  });

  it('writes configs that the model config schema accepts', () => {
    for (const name of ['mlp-classifier', 'small-cnn', 'text-classifier']) {
      const parsed = ModelConfigSchema.safeParse(parse(readFileSync(join(tmp, name, 'config.yaml'), 'utf8')));
      expect(parsed.error?.message, name).toBeUndefined();
      expect(parsed.data?.name).toBe(name);
      expect(parsed.data?.batchGears).toEqual([1, 2, 4, 8, 16, 32]);
    }
  });
});
