// onnxruntime-node timing of the models the C++ bench writes (sim_test_fast --bench).
// Usage: node test/ort_bench.mjs  (run after the C++ bench, same machine). With
// NPU_FLEET_SIM_THREADS=1 both sides run single-threaded and CPU time is the fair comparison
// on a shared, loaded machine.
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
  const threads = Number(process.env.NPU_FLEET_SIM_THREADS ?? 0);
  const s = await ort.InferenceSession.create(path, threads ? { intraOpNumThreads: threads, interOpNumThreads: 1 } : {});
  const n = shape.reduce((a, b) => a * b, 1);
  const x = new ort.Tensor('float32', Float32Array.from({ length: n }, (_, i) => Math.sin(i)), shape);
  for (let i = 0; i < 20; i++) await s.run({ [input]: x });
  let iters = 0;
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  while (performance.now() - t0 < 2000) {
    await s.run({ [input]: x });
    iters++;
  }
  const c = process.cpuUsage(c0);
  const wall = ((performance.now() - t0) * 1000) / iters;
  const cpu = (c.user + c.system) / iters;
  console.log(`${name}: ${wall.toFixed(1)} us/run wall, ${cpu.toFixed(1)} us CPU (onnxruntime, ${iters} iterations)`);
}
