import fc from 'fast-check';
import { isDeepStrictEqual } from 'node:util';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { isPlainRequest, type TensorForm } from '../../../src/contracts/request-fast-check.ts';
import { RequestEnvelopeSchema, RequestFrameHeaderSchema, RequestJsonSchema } from '../../../src/contracts/request-envelope.ts';
import { requestArb } from '../codec/arbitraries.ts';
import { Rng, emit, fromPlain, iterationSeed, mutateBytes, mutateTree } from '../codec/codec-fuzz-mutators.ts';
import { SEED_INPUTS, splitFrame } from '../codec/codec-fuzz-seeds.ts';

// The fast check may only ever say yes where zod says yes with the same output; and it must say
// yes to plain valid requests, or the speed-up silently disappears.

const SCHEMAS: Record<TensorForm, z.ZodType> = { frame: RequestFrameHeaderSchema, json: RequestJsonSchema, memory: RequestEnvelopeSchema };

/** A valid request in the given wire form (tensor bytes as byteLength, base64, or bytes). */
function inForm(form: TensorForm) {
  return requestArb().map((r) => ({
    ...r,
    inputs: r.inputs.map((t) =>
      form === 'frame'
        ? { name: t.name, dtype: t.dtype, shape: t.shape, byteLength: t.data.byteLength }
        : form === 'json'
          ? { name: t.name, dtype: t.dtype, shape: t.shape, data: Buffer.from(t.data).toString('base64') }
          : t,
    ),
  })) as fc.Arbitrary<Record<string, unknown> & { inputs: Array<Record<string, unknown>> }>;
}

/** Values near every check's edge, and of every wrong type. */
const edgy = fc.constantFrom<unknown>(
  undefined, null, '', 'x', 'a'.repeat(64), 'a'.repeat(65), 'a'.repeat(128), 'a'.repeat(129), 'a'.repeat(249), 'a'.repeat(250),
  'a'.repeat(257), '-bad', 'ok.model_1', 'white space', 'r\ud800', '\udc00', 0, -0, 1, 15, 16, -1, 1.5, 2 ** 53, 2 ** 53 - 1, 8.64e15, 8.64e15 + 2,
  Number.NaN, Number.POSITIVE_INFINITY, true, [], [1], {}, { a: 1 }, 'float32', 'float64', new Uint8Array(4), [0], [1, 2], [-1],
  [1.5], Array.from({ length: 9 }, () => 1), Array.from({ length: 8 }, () => 1),
);
const TOP_KEYS = ['id', 'model', 'version', 'priority', 'deadlineAt', 'replyTo', 'streamKey', 'createdAt', 'meta', 'inputs', 'extra'];
const TENSOR_KEYS = ['name', 'dtype', 'shape', 'byteLength', 'data', 'extra'];

type Mutation = { where: 'top' | 'tensor'; key: string; value: unknown; drop: boolean };
const mutationArb: fc.Arbitrary<Mutation> = fc.record({
  where: fc.constantFrom('top' as const, 'tensor' as const),
  key: fc.constantFrom(...TOP_KEYS, ...TENSOR_KEYS),
  value: edgy,
  drop: fc.boolean(),
});

function mutate(base: Record<string, unknown> & { inputs: Array<Record<string, unknown>> }, ms: Mutation[]): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base, inputs: base.inputs.map((t) => ({ ...t })) };
  for (const m of ms) {
    const first: unknown = Array.isArray(out.inputs) ? out.inputs[0] : undefined;
    const target = m.where === 'tensor' && typeof first === 'object' && first !== null ? (first as Record<string, unknown>) : out;
    if (m.drop) delete target[m.key];
    else target[m.key] = m.value;
  }
  return out;
}

describe('isPlainRequest', () => {
  for (const form of ['frame', 'json', 'memory'] as const) {
    const schema = SCHEMAS[form];

    it(`${form}: says yes to every valid request without meta, with zod's own output`, () => {
      fc.assert(
        fc.property(inForm(form), (r) => {
          const { meta: _meta, ...plain } = r;
          expect(isPlainRequest(plain, form)).toBe(true);
          const parsed = schema.safeParse(plain);
          expect(parsed.success).toBe(true);
          expect(parsed.data).toEqual(plain);
        }),
        { numRuns: 300 },
      );
    });

    it(`${form}: never says yes where zod says no or would change the header`, () => {
      let yes = 0;
      let no = 0;
      fc.assert(
        fc.property(inForm(form), fc.array(mutationArb, { minLength: 1, maxLength: 3 }), (r, ms) => {
          const header = mutate(r, ms);
          if (!isPlainRequest(header, form)) {
            no++;
            return;
          }
          yes++;
          const parsed = schema.safeParse(header);
          expect(parsed.error?.issues).toBeUndefined();
          expect(parsed.data).toEqual(header);
        }),
        { numRuns: 3000 },
      );
      // Both answers were exercised, so the property above was not vacuous.
      expect(yes).toBeGreaterThan(100);
      expect(no).toBeGreaterThan(100);
    });
  }

  // The codec fuzzer's request headers (test/unit/codec/codec-fuzz-mutators.ts): duplicated and removed
  // keys, __proto__ and constructor keys, 1e309 and -0, lone surrogates, deep nesting, base64 edge
  // cases, and headers whose bytes were damaged but still parse.
  for (const form of ['frame', 'json'] as const) {
    it(`${form}: on the codec fuzzer's mutated headers, every yes is zod's yes with zod's output`, () => {
      const seeds = SEED_INPUTS.filter((s) => s.kind === 'request' && s.form === form);
      const schema = SCHEMAS[form];
      let yes = 0;
      let parsedHeaders = 0;
      for (let i = 0; i < 10_000; i++) {
        const rng = new Rng(iterationSeed(0xfa57, i));
        const seed = rng.pick(seeds);
        let text = form === 'frame' ? splitFrame(seed.bytes).header : seed.bytes.toString('utf8');
        let tree = fromPlain(JSON.parse(text));
        for (let n = rng.int(4); n > 0; n--) tree = mutateTree(rng, tree);
        text = emit(tree);
        if (rng.chance(0.2)) text = mutateBytes(rng, Buffer.from(text), rng.pick(seeds).bytes).toString('utf8');
        let header: unknown;
        try {
          header = JSON.parse(text);
        } catch {
          continue;
        }
        parsedHeaders++;
        if (!isPlainRequest(header, form)) continue;
        yes++;
        const parsed = schema.safeParse(header);
        if (!parsed.success || !isDeepStrictEqual(parsed.data, header)) {
          throw new Error(`iteration ${i}: isPlainRequest said yes but zod ${parsed.success ? 'changed it' : `said ${parsed.error.message}`}: ${text.slice(0, 500)}`);
        }
      }
      // The mutations leave a good share of headers plainly valid, so the check is not vacuous.
      expect(parsedHeaders).toBeGreaterThan(6_000);
      expect(yes).toBeGreaterThan(1_000);
      console.log(`${form}: ${parsedHeaders} mutated headers, ${yes} plainly valid (zod agreed on each)`);
    });
  }

  it('leaves meta, unknown keys and non-plain objects to zod', () => {
    const base = { id: 'a', model: 'm', createdAt: 1, inputs: [{ name: 'x', dtype: 'float32', shape: [1], byteLength: 4 }] };
    expect(isPlainRequest(base, 'frame')).toBe(true);
    expect(isPlainRequest({ ...base, meta: { k: 1 } }, 'frame')).toBe(false);
    expect(isPlainRequest({ ...base, colour: 'red' }, 'frame')).toBe(false);
    expect(isPlainRequest(Object.assign(Object.create({ inherited: 1 }) as object, base), 'frame')).toBe(false);
    expect(isPlainRequest({ ...base, inputs: [{ ...base.inputs[0], data: 'AAAA' }] }, 'frame')).toBe(false);
    expect(isPlainRequest([base], 'frame')).toBe(false);
    expect(isPlainRequest(null, 'frame')).toBe(false);
  });
});
