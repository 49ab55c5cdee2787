/**
 * Dynamic-batch models whose output's batch is not one leading row per item: a flattened output
 * [batch x 4] and a transposed one [3, batch] (shared by the gear output-dims tests and the
 * worker's per-request split of such outputs).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { attr, encodeModel, type GraphDef } from '../../scripts/onnx/onnx-model.ts';
import { i64 } from '../../scripts/onnx/tensors.ts';
import { tempDir } from './temp-dir.ts';

const dir = tempDir('npu-fleet-gear-out-dims-');

/** Written to `path` (e.g. a repository's <model>/<version>/model.onnx), else to a temp file. */
function write(name: string, graph: GraphDef, path = join(dir, `${name}.onnx`)): string {
  writeFileSync(path, encodeModel({ graph, irVersion: 8, opsetImports: [{ domain: '', version: 17 }] }));
  return path;
}

/** y = Reshape(x [batch, 4], [-1]): y has batch x 4 elements. */
export function flattenModel(path?: string): string {
  return write('flatten', {
    name: 'flatten',
    nodes: [{ opType: 'Reshape', inputs: ['x', 'flat'], outputs: ['y'] }],
    inputs: [{ name: 'x', dtype: 'float32', dims: ['batch', 4] }],
    outputs: [{ name: 'y', dtype: 'float32', dims: ['n'] }],
    initializers: [i64('flat', [1], [-1])],
  }, path);
}

/** y = Transpose(x [batch, 3]): y is [3, batch]. */
export function transposeModel(path?: string): string {
  return write('transpose', {
    name: 'transpose',
    nodes: [{ opType: 'Transpose', inputs: ['x'], outputs: ['y'], attributes: { perm: attr.ints([1, 0]) } }],
    inputs: [{ name: 'x', dtype: 'float32', dims: ['batch', 3] }],
    outputs: [{ name: 'y', dtype: 'float32', dims: [3, 'batch'] }],
  }, path);
}

/** x as [rows, cols], transposed, row-major. */
export function transposed(x: Float32Array, rows: number, cols: number): number[] {
  const out: number[] = [];
  for (let c = 0; c < cols; c++) for (let r = 0; r < rows; r++) out.push(x[r * cols + c]!);
  return out;
}

/** Gears of batches put in flight at once: neighbours differ, so both slots hold different gears. */
export const GEARS = [4, 1, 2, 4, 1, 4, 2, 1];
