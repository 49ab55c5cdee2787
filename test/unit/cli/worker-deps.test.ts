import { describe, expect, it } from 'vitest';
import { mkdirSync, writeFileSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { checkModelRepository, checkModelRepositoryDirectory, largestRequestBytes, workerDeps } from '../../../src/cli/worker-deps.ts';
import { loadFleetConfig, parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { DEFAULT_LIMITS } from '../../../src/contracts/limits.ts';
import { ModelConfigSchema } from '../../../src/contracts/model-config.ts';
import { backendInfo } from '../../../src/device/index.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

describe('workerDeps', () => {
  it('refuses devices.backend ascend without CANN as a config error naming the field and the fix', () => {
    // This machine runs the simulator (the test setup builds it; no CANN here).
    expect(backendInfo().kind).toBe('sim');
    let err: unknown;
    try {
      workerDeps(parseFleetConfig({ devices: { backend: 'ascend' } }));
    } catch (e) {
      err = e;
    }
    // A config error: the CLI prints its message (exit 2), not a stack trace (exit 1).
    expect(FleetError.is(err, 'INVALID_CONFIG')).toBe(true);
    expect((err as Error).message).toMatch(/devices\.backend is "ascend".*install CANN or set NPU_FLEET_ACL_LIB/);
  });
});

describe('checkModelRepository', () => {
  it('passes a directory; refuses a missing path or a file as a config error naming modelRepository', async () => {
    const dir = tempDir('npu-fleet-repo-check-');
    await expect(checkModelRepository(parseFleetConfig({ modelRepository: dir }))).resolves.toBeUndefined();
    const file = join(dir, 'models.tar');
    writeFileSync(file, '');
    for (const [path, why] of [[join(dir, 'absent'), ' (ENOENT)'], [file, '']] as const) {
      const err: unknown = await checkModelRepository(parseFleetConfig({ modelRepository: path })).catch((e: unknown) => e);
      expect(FleetError.is(err, 'INVALID_CONFIG'), String(err)).toBe(true);
      expect((err as Error).message).toBe(`model repository ${path} is not a directory${why}; set modelRepository in the fleet config`);
    }
  });

  it('names the environment variable that set a missing modelRepository as its source and fix, not the config file', async () => {
    const dir = tempDir('npu-fleet-repo-origin-');
    const absent = join(dir, 'nonexistent');
    const file = join(dir, 'fleet.yaml');
    writeFileSync(file, 'devices: { count: 1 }\n');
    const message = async (config: Parameters<typeof checkModelRepository>[0]): Promise<string> =>
      String(((await checkModelRepository(config).catch((e: unknown) => e)) as Error | undefined)?.message);
    const fromEnv = await message(loadFleetConfig({ file, env: { NPU_FLEET__MODEL_REPOSITORY: absent } }));
    expect(fromEnv).toBe(
      `model repository ${absent} is not a directory (ENOENT); modelRepository was set by the environment variable NPU_FLEET__MODEL_REPOSITORY: fix NPU_FLEET__MODEL_REPOSITORY or unset it`,
    );
    // The lone worker's check says the same.
    const lone: unknown = await checkModelRepositoryDirectory(loadFleetConfig({ file, env: { NPU_FLEET__MODEL_REPOSITORY: absent } })).catch((e: unknown) => e);
    expect(FleetError.is(lone, 'INVALID_CONFIG') && lone.message).toBe(fromEnv);
    // Set in the file: the file is named.
    const inFile = join(dir, 'in-file.yaml');
    writeFileSync(inFile, `modelRepository: ${absent}\n`);
    expect(await message(loadFleetConfig({ file: inFile, env: {} }))).toMatch(/; set modelRepository in the fleet config .*in-file\.yaml$/);
  });

  /** A repository holding these model directories, each with a config.yaml (the check reads no more of it). */
  function repoWith(names: readonly string[]): string {
    const dir = tempDir('npu-fleet-repo-models-');
    for (const name of names) {
      mkdirSync(join(dir, name, '1'), { recursive: true });
      writeFileSync(join(dir, name, 'config.yaml'), `name: ${name}\n`);
    }
    return dir;
  }

  async function refusal(config: Parameters<typeof checkModelRepository>[0]): Promise<string> {
    const err: unknown = await checkModelRepository(config).catch((e: unknown) => e);
    if (err === undefined) return 'no error';
    expect(FleetError.is(err, 'INVALID_CONFIG'), String(err)).toBe(true);
    return (err as Error).message;
  }

  // models: [mlp-clasifier] (a typo) started, each worker exited 2 on a model its repository lacks,
  // and the supervisor restarted it for good.
  it('refuses a name in models without <repository>/<name>/config.yaml, naming it, the repository and the models it holds', async () => {
    const dir = repoWith(['mlp-classifier', 'small-cnn', 'text-classifier']);
    // A directory without its config.yaml is not a model (the worker's check is the same).
    mkdirSync(join(dir, 'half-copied', '1'), { recursive: true });
    expect(await refusal(parseFleetConfig({ modelRepository: dir, models: ['mlp-clasifier'] }))).toBe(
      `models lists mlp-clasifier, which the model repository ${dir} does not hold (no mlp-clasifier/config.yaml); it holds mlp-classifier, small-cnn, text-classifier: ` +
        'fix the name in models (NPU_FLEET__MODELS), deploy the model, or drop it from the list',
    );
    // Every absent one is named, also beside a name the repository has.
    expect(await refusal(parseFleetConfig({ modelRepository: dir, models: ['small-cnn', 'half-copied', 'resnet'] }))).toMatch(
      /^models lists half-copied, resnet, which the model repository .* does not hold \(no half-copied\/config\.yaml, resnet\/config\.yaml\); it holds mlp-classifier, small-cnn, text-classifier: /,
    );
    expect(await refusal(parseFleetConfig({ modelRepository: dir, models: ['small-cnn', 'mlp-classifier'] }))).toBe('no error');
    // No models list: serve all the repository holds.
    expect(await refusal(parseFleetConfig({ modelRepository: dir }))).toBe('no error');
  });

  it('lists at most 10 of the models the repository holds, and says when it holds none', async () => {
    const many = repoWith(Array.from({ length: 14 }, (_, i) => `model-${String(i).padStart(2, '0')}`));
    expect(await refusal(parseFleetConfig({ modelRepository: many, models: ['typo'] }))).toContain(
      '; it holds model-00, model-01, model-02, model-03, model-04, model-05, model-06, model-07, model-08, model-09 and 4 more: fix the name',
    );
    const empty = repoWith([]);
    expect(await refusal(parseFleetConfig({ modelRepository: empty, models: ['mlp-classifier'] }))).toBe(
      `models lists mlp-classifier, which the model repository ${empty} does not hold (no mlp-classifier/config.yaml); it holds no model (no <name>/config.yaml): ` +
        'fix the name in models (NPU_FLEET__MODELS), deploy the model, or drop it from the list',
    );
  });

  it('leaves a repository that does not answer (a hung mount) to the workers: passes after its bound', async () => {
    const never = new Promise<never>(() => undefined);
    const hung = { stat: () => never, readdir: () => never };
    const config = parseFleetConfig({ modelRepository: repoWith([]), models: ['mlp-classifier'] });
    const startedAt = Date.now();
    await expect(checkModelRepository(config, 200, hung)).resolves.toBeUndefined();
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(190);
    // The directory answers, a model's config.yaml does not: the same.
    const slowModel = { stat: (path: string) => (path.endsWith('config.yaml') ? never : stat(path)), readdir: () => never };
    await expect(checkModelRepository(config, 200, slowModel)).resolves.toBeUndefined();
  });
});

function model(name: string, dims: number[], extra: Record<string, unknown> = {}): ReturnType<typeof ModelConfigSchema.parse> {
  return ModelConfigSchema.parse({ name, inputs: [{ name: 'x', dtype: 'float32', dims }], outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 10] }], ...extra });
}

describe('largestRequestBytes', () => {
  const header = 12 + DEFAULT_LIMITS.maxHeaderBytes;

  it('is the largest gear of samples of fixed inputs, base64-sized, plus the most header', () => {
    // One 3x224x224 float32 image: 602,112 bytes raw, 802,816 as base64.
    expect(largestRequestBytes([model('img', [-1, 3, 224, 224], { maxBatchSize: 1 })], DEFAULT_LIMITS)).toBe(header + 802_816 + 8);
    // 32 samples of 64 float32: 8 KiB raw.
    expect(largestRequestBytes([model('mlp', [-1, 64])], DEFAULT_LIMITS)).toBe(header + 4 * Math.ceil(8192 / 3) + 8);
    // The largest gear bounds a request, not maxBatchSize.
    expect(largestRequestBytes([model('g', [-1, 64], { batchGears: [1, 4] })], DEFAULT_LIMITS)).toBe(header + 4 * Math.ceil(1024 / 3) + 8);
  });

  it('a bucketed axis counts at its largest bound', () => {
    const text = ModelConfigSchema.parse({
      name: 'text',
      inputs: [{ name: 'tokens', dtype: 'int64', dims: [-1, -1] }],
      outputs: [{ name: 'probs', dtype: 'float32', dims: [-1, 4] }],
      buckets: { input: 'tokens', axis: 1, bounds: [16, 128] },
    });
    // 32 samples of 128 int64 tokens: 32 KiB raw.
    expect(largestRequestBytes([text], DEFAULT_LIMITS)).toBe(header + 4 * Math.ceil(32_768 / 3) + 8);
  });

  it('the largest model counts; limits.maxMessageBytes bounds it; no model, no bound', () => {
    const models = [model('mlp', [-1, 64]), model('img', [-1, 3, 224, 224], { maxBatchSize: 1 })];
    expect(largestRequestBytes(models, DEFAULT_LIMITS)).toBe(header + 802_816 + 8);
    expect(largestRequestBytes([], DEFAULT_LIMITS)).toBeUndefined();
    expect(largestRequestBytes([model('img', [-1, 3, 224, 224])], { ...DEFAULT_LIMITS, maxMessageBytes: 1_000_000 })).toBe(1_000_000);
  });
});
