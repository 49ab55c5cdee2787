/**
 * Writes the example model repository: `<out>/README.md`, and `<out>/<name>/config.yaml` and
 * `<out>/<name>/1/model.onnx` for each model in scripts/onnx/example-models.ts.
 * Deterministic: same bytes on every run.
 *
 *   npm run gen:models [-- <outDir>]     (default: examples/models)
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { exampleModels, repositoryReadme } from './onnx/example-models.ts';

export const DEFAULT_MODELS_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..', 'examples', 'models');

/** Generates every example model under `outDir`; returns the files written (absolute paths). */
export function generateModels(outDir: string = DEFAULT_MODELS_DIR): string[] {
  const written: string[] = [];
  mkdirSync(outDir, { recursive: true });
  const readmePath = join(outDir, 'README.md');
  writeFileSync(readmePath, repositoryReadme());
  written.push(readmePath);
  for (const m of exampleModels()) {
    const dir = join(outDir, m.name);
    mkdirSync(join(dir, '1'), { recursive: true });
    const configPath = join(dir, 'config.yaml');
    const onnxPath = join(dir, '1', 'model.onnx');
    writeFileSync(configPath, m.configYaml);
    writeFileSync(onnxPath, m.onnx);
    written.push(configPath, onnxPath);
  }
  return written;
}

const entry = process.argv[1];
if (entry !== undefined && import.meta.url === pathToFileURL(resolve(entry)).href) {
  const outDir = process.argv[2] === undefined ? DEFAULT_MODELS_DIR : resolve(process.argv[2]);
  for (const file of generateModels(outDir)) console.log(`wrote ${file}`);
}
