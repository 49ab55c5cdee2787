import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { encodeModel } from '../../scripts/onnx/onnx-model.ts';
import { f32 } from '../../scripts/onnx/tensors.ts';

/**
 * Writes `<dir>/<version>/model.onnx`: y = x * k + v over float32 [batch, 4], so a test can tell
 * exactly what a served result must hold (and, with a k and v per version, which version served
 * it). Returns the model file's path.
 */
export function writeAffineVersion(modelDir: string, version: string, k: number, v: number): string {
  const dir = join(modelDir, version);
  mkdirSync(dir, { recursive: true });
  const path = join(dir, 'model.onnx');
  writeFileSync(
    path,
    encodeModel({
      graph: {
        name: 'affine',
        nodes: [
          { opType: 'Mul', inputs: ['x', 'k'], outputs: ['xk'] },
          { opType: 'Add', inputs: ['xk', 'v'], outputs: ['y'] },
        ],
        inputs: [{ name: 'x', dtype: 'float32', dims: ['batch', 4] }],
        outputs: [{ name: 'y', dtype: 'float32', dims: ['batch', 4] }],
        initializers: [f32('k', [1], [k]), f32('v', [1], [v])],
      },
      irVersion: 8,
      opsetImports: [{ domain: '', version: 17 }],
    }),
  );
  return path;
}
