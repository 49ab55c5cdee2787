import fc from 'fast-check';
import { DTYPES, DTYPE_BYTES, type Dtype, type Tensor } from '../../../src/contracts/tensor.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';

export const dtypeArb = fc.constantFrom(...DTYPES);

export function tensorArb(dtype?: Dtype): fc.Arbitrary<Tensor> {
  return fc
    .record({
      name: fc.string({ minLength: 1, maxLength: 12 }),
      dtype: dtype ? fc.constant(dtype) : dtypeArb,
      shape: fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 1, maxLength: 4 }),
    })
    .chain((m) => {
      const n = m.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[m.dtype];
      return fc.uint8Array({ minLength: n, maxLength: n }).map((data) => ({ ...m, data }));
    });
}

const idArb = fc.string({ minLength: 1, maxLength: 40 });
const modelArb = fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,20}$/);
const metaArb = fc.option(fc.dictionary(fc.string({ maxLength: 8 }), fc.oneof(fc.string({ maxLength: 20 }), fc.integer(), fc.boolean())), {
  nil: undefined,
});

export function requestArb(dtype?: Dtype): fc.Arbitrary<RequestEnvelope> {
  return fc
    .record(
      {
        id: idArb,
        model: modelArb,
        version: fc.option(fc.constantFrom('1', '2', '17'), { nil: undefined }),
        inputs: fc.array(tensorArb(dtype), { minLength: 1, maxLength: 3 }),
        priority: fc.option(fc.integer({ min: 0, max: 3 }), { nil: undefined }),
        deadlineAt: fc.option(fc.integer({ min: 0, max: 4e12 }), { nil: undefined }),
        replyTo: fc.option(fc.constantFrom('replies', 'a.b-c'), { nil: undefined }),
        streamKey: fc.option(fc.constantFrom('cam-1', 'cam-2'), { nil: undefined }),
        createdAt: fc.integer({ min: 0, max: 4e12 }),
        meta: metaArb,
      },
      { requiredKeys: ['id', 'model', 'inputs', 'createdAt'] },
    )
    .map((r) => Object.fromEntries(Object.entries(r).filter(([, v]) => v !== undefined)) as unknown as RequestEnvelope);
}

export function resultArb(): fc.Arbitrary<ResultEnvelope> {
  return fc
    .record({
      id: idArb,
      model: modelArb,
      version: fc.constantFrom('', '1'),
      status: fc.constantFrom('ok', 'expired', 'rejected', 'invalid', 'failed' as const),
      outputs: fc.option(fc.array(tensorArb(), { maxLength: 2 }), { nil: undefined }),
      timings: fc.record({
        queuedMs: fc.nat(1000),
        batchWaitMs: fc.nat(1000),
        deviceMs: fc.nat(1000),
        totalMs: fc.nat(5000),
      }),
      batchSize: fc.nat(64),
      gear: fc.nat(64),
      device: fc.integer({ min: -1, max: 7 }),
      worker: fc.constantFrom('w0', 'host-1/dev1'),
    })
    .map((r) => Object.fromEntries(Object.entries(r).filter(([, v]) => v !== undefined)) as unknown as ResultEnvelope);
}
