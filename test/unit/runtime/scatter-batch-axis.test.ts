import { describe, expect, it } from 'vitest';
import { ModelConfigSchema } from '../../../src/contracts/model-config.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { scatterOutputs } from '../../../src/runtime/batch-io.ts';

/**
 * An output's batch need not be one leading row per item: it lies on the first -1 of the output's
 * config.yaml dims and holds size / gear slots per item (a flattened [batch x 4] has 4 per item).
 * The split used to take dim 0 with one row per item, giving the flattened output 1 value each.
 */
const f32 = (values: number[]): Uint8Array => new Uint8Array(Float32Array.from(values).buffer);
const values = (data: Uint8Array): number[] => Array.from(new Float32Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength)));
const ramp = (n: number): number[] => Array.from({ length: n }, (_, i) => i + 1);

function configWith(dims: number[], extra: Record<string, unknown> = {}) {
  return ModelConfigSchema.parse({
    name: 'axis',
    inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }],
    outputs: [{ name: 'y', dtype: 'float32', dims }],
    batchGears: [1, 2, 4],
    maxBatchSize: 4,
    ...extra,
  });
}

const members = (counts: number[]) => counts.map((items) => ({ items }) as never);

describe('scatterOutputs along an output batch axis', () => {
  it.each([
    // [name, config dims, device dims, data, gear, counts, want per request: [shape, values]]
    ['one leading row per item [-1, 2]', [-1, 2], [4, 2], ramp(8), 4, [1, 2], [[[1, 2], [1, 2]], [[2, 2], [3, 4, 5, 6]]]],
    ['flattened [-1], gear x 4 values', [-1], [8], ramp(8), 2, [1, 1], [[[4], [1, 2, 3, 4]], [[4], [5, 6, 7, 8]]]],
    ['flattened [-1], gear padding left out', [-1], [16], ramp(16), 4, [2, 1], [[[8], ramp(8)], [[4], [9, 10, 11, 12]]]],
    // [3, gear 4] row-major: row r holds item values r*4+1 .. r*4+4
    ['transposed [3, -1]', [3, -1], [3, 4], ramp(12), 4, [1, 2], [[[3, 1], [1, 5, 9]], [[3, 2], [2, 3, 6, 7, 10, 11]]]],
    ['transposed [3, -1] with 2 slots per item', [3, -1], [3, 4], ramp(12), 2, [1, 1], [[[3, 2], [1, 2, 5, 6, 9, 10]], [[3, 2], [3, 4, 7, 8, 11, 12]]]],
  ] as const)('%s', (_name, dims, deviceDims, data, gear, counts, want) => {
    const perRequest = scatterOutputs([{ data: f32([...data]), dims: [...deviceDims] }], configWith([...dims]), { gear, members: members([...counts]) });
    expect(perRequest.map(([t]) => [t?.shape, values(t!.data)])).toEqual(want);
  });

  it('keeps a bucketed model cutting its per-position output back to each length', () => {
    const config = configWith([-1, -1], { inputs: [{ name: 'x', dtype: 'float32', dims: [-1, -1] }], buckets: { input: 'x', axis: 1, bounds: [3] } });
    const batch = { gear: 2, members: [{ items: 1, length: 2 }, { items: 1, length: 3 }] as never[] };
    const perRequest = scatterOutputs([{ data: f32(ramp(6)), dims: [2, 3] }], config, batch);
    expect(perRequest.map(([t]) => [t?.shape, values(t!.data)])).toEqual([[[1, 2], [1, 2]], [[1, 3], [4, 5, 6]]]);
  });

  it.each([
    ['not a whole number of slots per item', [-1], [6], 4],
    ['fewer values than items', [3, -1], [3, 1], 2],
  ] as const)('fails the batch with INTERNAL naming the output when %s', (_name, dims, deviceDims, gear) => {
    const config = ModelConfigSchema.parse({
      ...configWith([...dims]),
      outputs: [{ name: 'ok', dtype: 'float32', dims: [-1, 1] }, { name: 'y', dtype: 'float32', dims: [...dims] }],
    });
    const n = deviceDims.reduce<number>((a, b) => a * b, 1);
    const run = () => scatterOutputs([{ data: f32(ramp(gear)), dims: [gear, 1] }, { data: f32(ramp(n)), dims: [...deviceDims] }], config, { gear, members: members([1, 1]) });
    expect(run).toThrow(FleetError);
    try {
      run();
    } catch (err) {
      expect(FleetError.is(err, 'INTERNAL')).toBe(true);
      expect((err as Error).message).toMatch(/^output y came back as \[/);
      expect((err as Error).message).not.toMatch(/\bok\b/);
    }
  });
});
