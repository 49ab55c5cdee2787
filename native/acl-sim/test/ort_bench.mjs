// onnxruntime-node timing of the models the C++ bench writes (sim_test_fast --bench).
// Usage: node test/ort_bench.mjs  (run after the C++ bench, same machine, nothing else running)
import { createRequire } from 'node:module';
import { resolve } from 'node:path';

const require = createRequire(resolve(import.meta.dirname, '../../../package.json'));
const ort = require('onnxruntime-node');

const cases = [
  ['mlp784_b32', '/tmp/acl_sim_bench_mlp.onnx', 'input', [32, 784]],
  ['mlp784_b1', '/tmp/acl_sim_bench_mlp.onnx', 'input', [1, 784]],
  ['cnn_b32', '/tmp/acl_sim_bench_cnn.onnx', 'image', [32, 1, 28, 28]],
];
for (const [name, path, input, shape] of cases) {
  const s = await ort.InferenceSession.create(path);
  const n = shape.reduce((a, b) => a * b, 1);
  const x = new ort.Tensor('float32', Float32Array.from({ length: n }, (_, i) => Math.sin(i)), shape);
  for (let i = 0; i < 20; i++) await s.run({ [input]: x });
  let iters = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < 2000) {
    await s.run({ [input]: x });
    iters++;
  }
  console.log(`${name}: ${(((performance.now() - t0) * 1000) / iters).toFixed(1)} us/run (onnxruntime, ${iters} iterations)`);
}
