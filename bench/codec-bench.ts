/**
 * Codec bench (issue 2): a 3x224x224 float32 request, measured side by side in one run.
 *   binary encode+decode  vs  JSON with number arrays (target: >= 20x faster)
 *   binary encode+decode  vs  a plain Buffer copy of the same bytes (target: <= 3x slower)
 * Run: npx tsx bench/codec-bench.ts
 */
import { decodeRequestBinary, decodeRequestJson, encodeRequestBinary, encodeRequestJson } from '../src/codec/index.ts';
import { bytesOf, tensorView } from '../src/contracts/tensor.ts';
import type { RequestEnvelope } from '../src/contracts/request-envelope.ts';

const values = Float32Array.from({ length: 3 * 224 * 224 }, (_, i) => Math.sin(i) * 10);
const request: RequestEnvelope = {
  id: 'bench-1',
  model: 'resnet',
  priority: 1,
  createdAt: Date.now(),
  deadlineAt: Date.now() + 1000,
  replyTo: 'resnet.replies',
  inputs: [{ name: 'image', dtype: 'float32', shape: [1, 3, 224, 224], data: bytesOf(values) }],
};

function timeIt(name: string, iterations: number, fn: () => unknown): number {
  for (let i = 0; i < Math.min(20, iterations); i++) fn(); // warm-up
  const t0 = process.hrtime.bigint();
  let sink = 0;
  for (let i = 0; i < iterations; i++) sink += fn() ? 1 : 0;
  const perOpUs = Number(process.hrtime.bigint() - t0) / 1000 / iterations;
  console.log(`${name.padEnd(44)} ${perOpUs.toFixed(1).padStart(10)} µs/op  (${iterations} ops, sink ${sink})`);
  return perOpUs;
}

function numberArrayJson(): unknown {
  const text = JSON.stringify({ ...request, inputs: [{ ...request.inputs[0], data: Array.from(values) }] });
  const parsed = JSON.parse(text) as { inputs: Array<{ data: number[] }> };
  return Float32Array.from(parsed.inputs[0]?.data ?? []);
}

function binaryRoundTrip(): unknown {
  const decoded = decodeRequestBinary(encodeRequestBinary(request));
  return tensorView('float32', decoded.inputs[0]?.data ?? new Uint8Array());
}

function base64Json(): unknown {
  const decoded = decodeRequestJson(encodeRequestJson(request));
  return tensorView('float32', decoded.inputs[0]?.data ?? new Uint8Array());
}

const valueBytes = bytesOf(values);
function plainCopy(): unknown {
  return Buffer.from(valueBytes); // one allocation + one copy, the floor for any encoding
}

console.log(`codec bench: one request of float32 [1,3,224,224] = ${values.byteLength} bytes, node ${process.version}`);
const copyUs = timeIt('plain Buffer copy of the tensor bytes', 2000, plainCopy);
const binUs = timeIt('binary frame encode + decode (+typed view)', 2000, binaryRoundTrip);
const b64Us = timeIt('JSON+base64 encode + decode', 60, base64Json);
const jsonUs = timeIt('JSON number arrays encode + decode', 12, numberArrayJson);
console.log('');
console.log(`binary vs JSON number arrays: ${(jsonUs / binUs).toFixed(1)}x faster (target >= 20x) ${jsonUs / binUs >= 20 ? 'PASS' : 'MISS'}`);
console.log(`binary vs plain Buffer copy:  ${(binUs / copyUs).toFixed(2)}x slower (target <= 3x) ${binUs / copyUs <= 3 ? 'PASS' : 'MISS'}`);
console.log(`JSON+base64 vs binary:        ${(b64Us / binUs).toFixed(1)}x slower`);
