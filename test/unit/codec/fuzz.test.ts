import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeRequest, decodeResult, encodeRequestBinary, encodeRequestJson, encodeResult } from '../../../src/codec/index.ts';
import { CodecLimitsSchema } from '../../../src/contracts/limits.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { requestArb, resultArb } from './arbitraries.ts';

const limits = CodecLimitsSchema.parse({ maxMessageBytes: 8192, maxElementsPerTensor: 512, maxMetaBytes: 256, maxHeaderBytes: 4096 });

type Mutation = { kind: 'truncate'; at: number } | { kind: 'flip'; at: number; bit: number } | { kind: 'random'; bytes: Uint8Array };

const seedArb = fc.oneof(
  requestArb().map((r) => encodeRequestBinary(r)),
  requestArb().map((r) => encodeRequestJson(r)),
  resultArb().map((r) => encodeResult(r, 'binary')),
);

const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('flip' as const), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  fc.record({ kind: fc.constant('random' as const), bytes: fc.uint8Array({ maxLength: 300 }) }),
);

function mutate(seed: Uint8Array, m: Mutation, flips: number): Uint8Array {
  if (m.kind === 'random') return m.bytes;
  if (m.kind === 'truncate') return seed.subarray(0, seed.byteLength === 0 ? 0 : m.at % seed.byteLength);
  const out = Uint8Array.from(seed);
  for (let i = 0; i < flips && out.byteLength > 0; i++) {
    const at = (m.at * (i + 1) * 2654435761) % out.byteLength;
    out[at] = (out[at] ?? 0) ^ (1 << ((m.bit + i) % 8));
  }
  return out;
}

/** Every input ends in a typed FleetError or a valid decode within the limits. */
function check(bytes: Uint8Array, which: 'request' | 'result'): 'ok' | 'error' {
  try {
    const env = which === 'request' ? decodeRequest(bytes, limits) : decodeResult(bytes, limits);
    const tensors = 'inputs' in env ? env.inputs : (env.outputs ?? []);
    for (const t of tensors) expect(t.data.byteLength).toBeLessThanOrEqual(limits.maxElementsPerTensor * 8);
    return 'ok';
  } catch (err) {
    expect(err).toBeInstanceOf(FleetError);
    expect(['INVALID_MESSAGE', 'LIMIT_EXCEEDED']).toContain((err as FleetError).code);
    expect((err as FleetError).details.field).toBeTypeOf('string');
    return 'error';
  }
}

describe('codec fuzzing', () => {
  it('10,000+ random, truncated and bit-flipped inputs each end in a typed error or a valid decode', () => {
    const counts = { ok: 0, error: 0 };
    const arrayBuffersBefore = process.memoryUsage().arrayBuffers;
    const started = performance.now();
    fc.assert(
      fc.property(seedArb, mutationArb, fc.integer({ min: 1, max: 4 }), (seed, m, flips) => {
        const bytes = mutate(seed, m, flips);
        for (const which of ['request', 'result'] as const) {
          const t0 = performance.now();
          counts[check(bytes, which)]++;
          expect(performance.now() - t0).toBeLessThan(250); // no hang on hostile input
        }
      }),
      { numRuns: 5200, seed: 20261129 },
    );
    expect(counts.ok + counts.error).toBeGreaterThanOrEqual(10_000);
    expect(counts.error).toBeGreaterThan(1000);
    expect(counts.ok).toBeGreaterThan(100);
    expect(performance.now() - started).toBeLessThan(55_000);
    // Nothing retained beyond transient decode buffers (limits cap each at a few KiB).
    expect(process.memoryUsage().arrayBuffers - arrayBuffersBefore).toBeLessThan(64 * 1024 * 1024);
  });

  it('rejects a header that claims a huge tensor before allocating anything', () => {
    const header = Buffer.from(
      JSON.stringify({ id: 'x', model: 'm', createdAt: 1, inputs: [{ name: 'a', dtype: 'float32', shape: [1e6, 1e6, 1e6], byteLength: 4 }] }),
    );
    const frame = Buffer.alloc(16 + header.byteLength);
    frame.write('NPUF', 0, 'latin1');
    frame.writeUInt8(1, 4);
    frame.writeUInt8(1, 5);
    frame.writeUInt32LE(header.byteLength, 8);
    header.copy(frame, 12);
    const before = process.memoryUsage().arrayBuffers;
    expect(() => decodeRequest(frame, limits)).toThrow(/maxElementsPerTensor/);
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(1024 * 1024);
  });

  it('rejects base64 data whose decoded length would not match before decoding it', () => {
    const json = JSON.stringify({ id: 'x', model: 'm', createdAt: 1, inputs: [{ name: 'a', dtype: 'float32', shape: [1, 2], data: 'AAAA' }] });
    expect(() => decodeRequest(Buffer.from(json), limits)).toThrowError(expect.objectContaining({ code: 'INVALID_MESSAGE', details: expect.objectContaining({ field: 'inputs[0].data', id: 'x', model: 'm' }) }));
  });

  it('rejects oversized messages and meta with LIMIT_EXCEEDED naming the limit', () => {
    expect(() => decodeRequest(new Uint8Array(limits.maxMessageBytes + 1), limits)).toThrow(/limits.maxMessageBytes/);
    const json = JSON.stringify({ id: 'x', model: 'm', createdAt: 1, meta: { big: 'x'.repeat(400) }, inputs: [{ name: 'a', dtype: 'uint8', shape: [1], data: 'AA==' }] });
    expect(() => decodeRequest(Buffer.from(json), limits)).toThrowError(expect.objectContaining({ code: 'LIMIT_EXCEEDED', details: expect.objectContaining({ field: 'meta' }) }));
  });
});
