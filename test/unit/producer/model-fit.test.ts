import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { localModelConfigs, modelFitCheck } from '../../../src/producer/model-fit.ts';
import { fleetErrorOf } from '../../helpers/fleet-error-of.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const repo = join(tempDir('npu-fleet-model-fit-'), 'models');
mkdirSync(join(repo, 'affine'), { recursive: true });
writeFileSync(
  join(repo, 'affine', 'config.yaml'),
  stringify({ name: 'affine', inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }], outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 4] }], maxBatchSize: 8, batchGears: [1, 2, 4], priorityLevels: 2 }),
);
mkdirSync(join(repo, 'text'), { recursive: true });
writeFileSync(
  join(repo, 'text', 'config.yaml'),
  stringify({
    name: 'text',
    inputs: [{ name: 'ids', dtype: 'int32', dims: [-1, -1] }],
    outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 2] }],
    maxBatchSize: 4,
    buckets: { input: 'ids', axis: 1, bounds: [16, 32] },
  }),
);
mkdirSync(join(repo, 'broken'), { recursive: true });
writeFileSync(join(repo, 'broken', 'config.yaml'), 'name: [not yaml we can use');

const tensor = (shape: number[], dtype: 'float32' | 'int32' = 'float32', name = 'x') => ({ name, dtype, shape, data: new Uint8Array(shape.reduce((a, b) => a * b, 1) * 4) });
const req = (model: string, inputs: RequestEnvelope['inputs'], extra: Partial<RequestEnvelope> = {}): RequestEnvelope => ({ id: 'r', model, createdAt: 1, inputs, ...extra });

describe('modelFitCheck: a request against its model config.yaml, before it is sent (the workers check, request-validation.ts)', () => {
  const check = modelFitCheck(localModelConfigs(repo), repo);

  it('passes a request that fits: the batch within the largest gear, a bucketed length within the largest bound', () => {
    expect(() => check(req('affine', [tensor([4, 4])]))).not.toThrow();
    expect(() => check(req('text', [tensor([2, 30], 'int32', 'ids')]))).not.toThrow();
  });

  it.each([
    ['an input name the model does not have', req('affine', [tensor([1, 4], 'float32', 'input')]), 'inputs[0].name', /"input" is not an input of affine \(inputs: x\)/],
    ['another dtype', req('affine', [tensor([1, 4], 'int32')]), 'inputs[0].dtype', /input "x" is float32, got int32/],
    ['another rank', req('affine', [tensor([1, 4, 1])]), 'inputs[0].shape', /has rank 2/],
    ['a fixed dim that differs', req('affine', [tensor([1, 3])]), 'inputs[0].shape[1]', /needs 4 here \(dims \[-1,4\]\), got 3/],
    ['more samples than maxBatchSize', req('affine', [tensor([9, 4])]), 'inputs[0].shape[0]', /9 samples exceed maxBatchSize 8 of affine/],
    ['more samples than the largest gear', req('affine', [tensor([6, 4])]), 'inputs[0].shape[0]', /6 samples exceed the largest batch gear 4 of affine/],
    ['a bucketed length past the largest bound', req('text', [tensor([1, 40], 'int32', 'ids')]), 'inputs[0].shape[1]', /length 40 is outside 1\.\.32/],
    ['a priority past its levels', req('affine', [tensor([1, 4])], { priority: 3 }), 'priority', /model affine has 2 levels/],
  ])('refuses %s as its workers would (INVALID_MESSAGE), naming the field, the config it was checked against, and that it was not sent', (_what, request, field, message) => {
    const err = fleetErrorOf(() => check(request));
    expect(err.code).toBe('INVALID_MESSAGE');
    expect(err.details).toMatchObject({ field });
    expect(err.message).toMatch(message);
    expect(err.message).toMatch(new RegExp(`^${field.replace(/[[\].]/g, '\\$&')}: `));
    expect(err.message).toContain(`; not sent: ${join(repo, request.model, 'config.yaml')} refuses it, as the model's workers would`);
  });

  it('skips, silently, what cannot be judged here: a repository not at hand, a model not in it, a config.yaml that cannot be read', () => {
    const elsewhere = modelFitCheck(localModelConfigs(join(repo, 'no-such-dir')), join(repo, 'no-such-dir'));
    expect(() => elsewhere(req('affine', [tensor([1, 3])]))).not.toThrow();
    expect(() => check(req('unknown-here', [tensor([1, 3])]))).not.toThrow();
    expect(() => check(req('broken', [tensor([1, 3])]))).not.toThrow();
    const notADir = join(repo, 'affine', 'config.yaml');
    expect(() => modelFitCheck(localModelConfigs(notADir), notADir)(req('affine', [tensor([1, 3])]))).not.toThrow();
  });

  it('reads a model config once per run: a config.yaml changed after the first line does not change the check', () => {
    const own = join(tempDir('npu-fleet-model-fit-once-'), 'models');
    mkdirSync(join(own, 'affine'), { recursive: true });
    writeFileSync(join(own, 'affine', 'config.yaml'), stringify({ name: 'affine', inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }], outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 4] }], maxBatchSize: 8 }));
    const once = modelFitCheck(localModelConfigs(own), own);
    expect(() => once(req('affine', [tensor([1, 3])]))).toThrow(/needs 4 here/);
    writeFileSync(join(own, 'affine', 'config.yaml'), 'not: [a config');
    expect(() => once(req('affine', [tensor([1, 3])]))).toThrow(/needs 4 here/);
  });
});
