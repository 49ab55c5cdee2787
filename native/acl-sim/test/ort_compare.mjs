// Differential oracle: runs every dumped case (model.onnx + inputs) through onnxruntime-node and
// compares with the simulator's outputs. Usage: node test/ort_compare.mjs <cases-dir> [rtol]
import { createRequire } from 'node:module';
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

const require = createRequire(resolve(import.meta.dirname, '../../../package.json'));
const ort = require('onnxruntime-node');

const dir = process.argv[2];
const rtol = Number(process.argv[3] ?? 1e-4);
const atol = 1e-5;
const TYPES = { 1: ['float32', Float32Array], 6: ['int32', Int32Array], 7: ['int64', BigInt64Array] };

function typed(buf, type) {
  const [, Ctor] = TYPES[type];
  const copy = new Uint8Array(buf).buffer;
  return new Ctor(copy);
}

let failed = 0;
let passed = 0;
for (const name of readdirSync(dir).sort()) {
  const caseDir = join(dir, name);
  const meta = JSON.parse(readFileSync(join(caseDir, 'meta.json'), 'utf8'));
  const session = await ort.InferenceSession.create(join(caseDir, 'model.onnx'));
  const feeds = {};
  meta.inputs.forEach((inp, i) => {
    const data = typed(readFileSync(join(caseDir, `in${i}.bin`)), inp.type);
    feeds[inp.name] = new ort.Tensor(TYPES[inp.type][0], data, inp.shape);
  });
  const result = await session.run(feeds);
  const outs = session.outputNames.map((n) => result[n]);
  const problems = [];
  meta.outputs.forEach((o, i) => {
    const want = outs[i];
    const got = typed(readFileSync(join(caseDir, `out${i}.bin`)), o.type);
    if (JSON.stringify(want.dims.map(Number)) !== JSON.stringify(o.shape)) {
      problems.push(`output ${i} shape ${JSON.stringify(o.shape)} vs ort ${JSON.stringify(want.dims)}`);
      return;
    }
    let worst = 0;
    for (let k = 0; k < got.length; k++) {
      const a = Number(got[k]);
      const b = Number(want.data[k]);
      const err = Math.abs(a - b) / (atol + rtol * Math.abs(b));
      if (!(err <= 1) && problems.length < 3) problems.push(`output ${i}[${k}] sim ${a} ort ${b}`);
      if (err > worst) worst = err;
    }
  });
  if (problems.length) {
    failed++;
    console.log(`FAIL ${name}: ${problems.join('; ')}`);
  } else {
    passed++;
  }
}
console.log(`ort_compare: ${passed} cases match onnxruntime (rtol ${rtol}, atol ${atol}), ${failed} differ`);
process.exit(failed ? 1 : 0);
