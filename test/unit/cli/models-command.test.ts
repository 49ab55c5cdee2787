import { cpSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { artifactFromEnv, loadCheckModelsCommand, validateModelsCommand } from '../../../src/cli/models-command.ts';
import { main } from '../../../src/cli/main.ts';
import { flattenModel, transposeModel } from '../../helpers/gear-output-models.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

describe('npu-fleet models validate', () => {
  it('passes the example repository and lists each model', () => {
    const lines: string[] = [];
    expect(validateModelsCommand('examples/models', (l) => lines.push(l))).toBe(0);
    expect(lines.filter((l) => l.startsWith('ok '))).toHaveLength(3);
    expect(lines.at(-1)).toMatch(/3 model\(s\), 0 problem\(s\)/);
  });

  it('fails with each problem named', () => {
    const dir = tempDir('npu-fleet-validate-');
    mkdirSync(join(dir, 'm', '1'), { recursive: true });
    writeFileSync(join(dir, 'm', 'config.yaml'), 'name: m\ninputs: [{name: x, dtype: float64, dims: [-1, 2]}]\noutputs: [{name: y, dtype: float32, dims: [-1]}]\n');
    const lines: string[] = [];
    expect(validateModelsCommand(dir, (l) => lines.push(l))).toBe(1);
    expect(lines.join('\n')).toMatch(/FAIL .*config.yaml: invalid model config .*inputs\[0\]\.dtype/);
  });

  // A model whose only version lost its model file was listed "ok   small-cnn: versions [], serving
  // []" above its own FAIL lines.
  it('does not list a model with a problem as ok', () => {
    const dir = tempDir('npu-fleet-validate-');
    cpSync('examples/models/mlp-classifier', join(dir, 'mlp-classifier'), { recursive: true });
    cpSync('examples/models/small-cnn', join(dir, 'small-cnn'), { recursive: true });
    rmSync(join(dir, 'small-cnn', '1', 'model.onnx'));
    const lines: string[] = [];
    expect(validateModelsCommand(dir, (l) => lines.push(l), 'onnx')).toBe(1);
    expect(lines.filter((l) => l.startsWith('ok '))).toEqual([expect.stringMatching(/^ok {3}mlp-classifier: /)]);
    expect(lines).toContainEqual(expect.stringMatching(/^FAIL .*small-cnn: no servable version/));
    expect(lines).toContainEqual(expect.stringMatching(/^bad {2}small-cnn: versions \[\], serving \[\], .*: 2 problem\(s\) below$/));
  });

  it('--load loads every served version on the simulator and checks its tensors against config.yaml', async () => {
    process.env.NPU_FLEET_DEVICE = 'sim';
    const lines: string[] = [];
    expect(await loadCheckModelsCommand('examples/models', 0, (l) => lines.push(l))).toBe(0);
    expect(lines.filter((l) => /^ok {3}\S+@1: loads on sim device 0 in \d+ ms; its tensors match config\.yaml$/.test(l))).toHaveLength(3);
    expect(lines.at(-1)).toBe('3 version(s) loaded, 0 failed (artifact: model.onnx, sim device 0)');
  });

  it('--load fails a version whose file does not match config.yaml, naming both sides', async () => {
    process.env.NPU_FLEET_DEVICE = 'sim';
    const dir = tempDir('npu-fleet-validate-load-');
    cpSync('examples/models/mlp-classifier', join(dir, 'mlp-classifier'), { recursive: true });
    cpSync('examples/models/small-cnn/1/model.onnx', join(dir, 'mlp-classifier', '1', 'model.onnx'));
    const lines: string[] = [];
    expect(validateModelsCommand(dir, () => {})).toBe(0); // the static check cannot see it
    expect(await loadCheckModelsCommand(dir, 0, (l) => lines.push(l))).toBe(1);
    expect(lines[0]).toMatch(/^FAIL mlp-classifier@1: .*config\.yaml lists \[input\] but the model has \[image\]/);
    expect(lines.at(-1)).toMatch(/^0 version\(s\) loaded, 1 failed/);
  });

  // Version 2 is served (versionPolicy latest 1); version 1 stays on disk for a rollback: removing
  // 2 makes it served, so --load checks it too, labelled, and a broken one fails the check.
  const rollbackRepo = (v1: 'good' | 'mismatched' | 'truncated'): string => {
    const dir = tempDir('npu-fleet-validate-rollback-');
    const model = join(dir, 'mlp-classifier');
    cpSync('examples/models/mlp-classifier', model, { recursive: true });
    cpSync(join(model, '1'), join(model, '2'), { recursive: true });
    if (v1 === 'mismatched') cpSync('examples/models/small-cnn/1/model.onnx', join(model, '1', 'model.onnx'));
    if (v1 === 'truncated') {
      const bytes = readFileSync(join(model, '1', 'model.onnx'));
      writeFileSync(join(model, '1', 'model.onnx'), bytes.subarray(0, bytes.length >> 1));
    }
    return dir;
  };
  const okLine = (label: string) => new RegExp(`^ok {3}${label.replace(/[()[\]]/g, '\\$&')}: loads on sim device 0 in \\d+ ms; its tensors match config\\.yaml$`);

  it.each([
    { v1: 'mismatched' as const, why: /config\.yaml does not match .*config\.yaml lists \[input\] but the model has \[image\]/ },
    { v1: 'truncated' as const, why: /aclmdlLoadFromFile failed: .*ACL_ERROR_DESERIALIZE_MODEL/ },
  ])('--load fails a $v1 version not served now (kept for rollback), naming it, while the served one loads', async ({ v1, why }) => {
    process.env.NPU_FLEET_DEVICE = 'sim';
    const dir = rollbackRepo(v1);
    const lines: string[] = [];
    expect(validateModelsCommand(dir, () => {}, 'onnx')).toBe(0); // the static check cannot see it
    expect(await loadCheckModelsCommand(dir, 0, (l) => lines.push(l))).toBe(1);
    expect(lines).toHaveLength(3);
    const fail = lines[0] as string;
    expect(fail.startsWith('FAIL mlp-classifier@1 (not served under versionPolicy latest 1): ')).toBe(true);
    expect(fail).toMatch(why);
    expect(fail).toMatch(/serving it \(a rollback, a versionPolicy change\) would fail/);
    expect(lines[1]).toMatch(okLine('mlp-classifier@2'));
    expect(lines[2]).toBe('1 served version(s) loaded, 0 failed; 1 not served now: 0 loaded, 1 failed (artifact: model.onnx, sim device 0)');
  });

  it('--load passes when the served and the unserved version both load, listing both', async () => {
    process.env.NPU_FLEET_DEVICE = 'sim';
    const dir = rollbackRepo('good');
    const lines: string[] = [];
    expect(await loadCheckModelsCommand(dir, 0, (l) => lines.push(l))).toBe(0);
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatch(okLine('mlp-classifier@1 (not served under versionPolicy latest 1)'));
    expect(lines[1]).toMatch(okLine('mlp-classifier@2'));
    expect(lines[2]).toBe('1 served version(s) loaded, 0 failed; 1 not served now: 1 loaded, 0 failed (artifact: model.onnx, sim device 0)');
  });

  it('--load names a specific versionPolicy, and the CLI exits 1 for a broken version it does not serve', async () => {
    process.env.NPU_FLEET_DEVICE = 'sim';
    const dir = rollbackRepo('mismatched');
    const config = join(dir, 'mlp-classifier', 'config.yaml');
    writeFileSync(config, readFileSync(config, 'utf8').replace('versionPolicy: { kind: latest }', 'versionPolicy: { kind: specific, versions: [2] }'));
    const lines: string[] = [];
    expect(await loadCheckModelsCommand(dir, 0, (l) => lines.push(l))).toBe(1);
    expect(lines[0]).toMatch(/^FAIL mlp-classifier@1 \(not served under versionPolicy specific \[2\]\): /);
    expect(await main(['models', 'validate', dir, '--load'])).toBe(1);
  });

  // A static problem in one model (a version directory still without its file) made --load skip
  // every load without a word: a corrupt or mismatched file in another model passed unseen, the
  // output no different from a run without --load.
  it('--load still loads the versions that scanned when another model has a static problem, and fails both', async () => {
    process.env.NPU_FLEET_DEVICE = 'sim';
    const dir = tempDir('npu-fleet-validate-load-static-');
    cpSync('examples/models/mlp-classifier', join(dir, 'mlp-classifier'), { recursive: true });
    cpSync('examples/models/small-cnn/1/model.onnx', join(dir, 'mlp-classifier', '1', 'model.onnx'));
    cpSync('examples/models/small-cnn', join(dir, 'small-cnn'), { recursive: true });
    mkdirSync(join(dir, 'small-cnn', '2'));
    let stdout = '';
    const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => ((stdout += String(chunk)), true));
    try {
      expect(await main(['models', 'validate', dir, '--load'])).toBe(1);
    } finally {
      spy.mockRestore();
    }
    expect(stdout).toContain(`FAIL ${join(dir, 'small-cnn', '2')}: missing model.onnx`);
    expect(stdout).toMatch(/^FAIL mlp-classifier@1: .*config\.yaml lists \[input\] but the model has \[image\]/m);
    expect(stdout).toMatch(/^ok {3}small-cnn@1: loads on sim device 0/m);
  });

  it('fails an empty model file without loading it (a copy that died, a placeholder)', () => {
    const dir = tempDir('npu-fleet-validate-empty-');
    cpSync('examples/models/mlp-classifier', join(dir, 'mlp-classifier'), { recursive: true });
    writeFileSync(join(dir, 'mlp-classifier', '1', 'model.onnx'), '');
    const lines: string[] = [];
    expect(validateModelsCommand(dir, (l) => lines.push(l), 'onnx')).toBe(1);
    expect(lines).toContain(`FAIL ${join(dir, 'mlp-classifier', '1')}: model.onnx is empty (0 bytes): copy the model file in again`);
  });

  it('a DIR that is not a directory is an argument error naming it', () => {
    expect(() => validateModelsCommand('/no/such/repo')).toThrow(/^\/no\/such\/repo is not a directory: give the model repository/);
  });

  it('rejects unknown commands and bad arguments with exit code 2', async () => {
    expect(await main(['frobnicate'])).toBe(2);
    expect(await main(['worker'])).toBe(2);
    expect(await main(['models', 'check'])).toBe(2);
  });
});

describe('npu-fleet models validate on a directory that is not a repository', () => {
  it('an empty directory fails naming why (no model directory), not with 0 problems', () => {
    const lines: string[] = [];
    const dir = tempDir('npu-fleet-validate-empty-');
    expect(validateModelsCommand(dir, (l) => lines.push(l))).toBe(1);
    expect(lines).toContain(`FAIL ${dir}: no model directory in it (a repository holds <dir>/<model>/config.yaml and <dir>/<model>/<version>/model.onnx)`);
  });

  it('a model directory given instead of its repository is named as such, with the command to run', () => {
    const lines: string[] = [];
    expect(validateModelsCommand('examples/models/mlp-classifier', (l) => lines.push(l))).toBe(1);
    const repo = join(process.cwd(), 'examples/models');
    expect(lines).toContain(
      `FAIL ${join(repo, 'mlp-classifier')}: holds a config.yaml, so it is a model directory, not a repository: run npu-fleet models validate ${repo}`,
    );
  });
});

describe('npu-fleet models validate without --load on a host with CANN', () => {
  const saved = { ...process.env };
  afterEach(() => {
    for (const k of ['NPU_FLEET_DEVICE', 'NPU_FLEET_ACL_LIB', 'ASCEND_HOME_PATH', 'ASCEND_TOOLKIT_HOME']) {
      if (saved[k] === undefined) delete process.env[k];
      else process.env[k] = saved[k];
    }
  });

  it('checks model.om, the file the workers there load (CANN found by ASCEND_HOME_PATH, no NPU_FLEET_DEVICE), not model.onnx', () => {
    const dir = tempDir('npu-fleet-validate-om-');
    mkdirSync(join(dir, 'mlp-classifier', '1'), { recursive: true });
    cpSync('examples/models/mlp-classifier/config.yaml', join(dir, 'mlp-classifier', 'config.yaml'));
    writeFileSync(join(dir, 'mlp-classifier', '1', 'model.om'), 'an offline model');
    delete process.env.NPU_FLEET_DEVICE;
    delete process.env.NPU_FLEET_ACL_LIB;
    process.env.ASCEND_HOME_PATH = '/usr/local/Ascend/ascend-toolkit/latest';
    const lines: string[] = [];
    expect(validateModelsCommand(dir, (l) => lines.push(l))).toBe(0);
    expect(lines.at(-1)).toMatch(/\(artifact: model\.om\b/);
    // NPU_FLEET_DEVICE=sim wins, as it does for the workers' ACL library.
    process.env.NPU_FLEET_DEVICE = 'sim';
    expect(validateModelsCommand(dir, () => {})).toBe(1);
  });

  it.each([
    [{}, 'onnx'],
    [{ NPU_FLEET_DEVICE: 'sim', ASCEND_HOME_PATH: '/x' }, 'onnx'],
    [{ NPU_FLEET_DEVICE: 'ascend' }, 'om'],
    [{ ASCEND_TOOLKIT_HOME: '/x' }, 'om'],
    [{ NPU_FLEET_ACL_LIB: '/opt/cann/lib64/libascendcl.so' }, 'om'],
    [{ NPU_FLEET_ACL_LIB: '/work/build/Release/libacl_sim.so' }, 'onnx'],
  ] as const)('with %j the workers load model.%s', (env, artifact) => {
    expect(artifactFromEnv(env)).toBe(artifact);
  });
});

describe('npu-fleet models validate on a model directory with release pointers', () => {
  it('passes a symlink to a version beside it (current -> 2, stable -> 1), and still fails one to a missing version or elsewhere', () => {
    const dir = tempDir('npu-fleet-validate-pointer-');
    const m = join(dir, 'mlp-classifier');
    cpSync('examples/models/mlp-classifier', m, { recursive: true });
    cpSync(join(m, '1'), join(m, '2'), { recursive: true });
    symlinkSync('2', join(m, 'current'));
    symlinkSync(join(m, '1'), join(m, 'stable'));
    const lines: string[] = [];
    expect(validateModelsCommand(dir, (l) => lines.push(l), 'onnx')).toBe(0);
    expect(lines).toEqual([
      'ok   mlp-classifier: versions [1, 2], serving [2], gears [1,2,4,8,16,32], 3 priority levels',
      `1 model(s), 0 problem(s) in ${dir} (artifact: model.onnx)`,
    ]);
    // Pointing at a version that is not there, or at a directory of another name: still reported.
    symlinkSync('3', join(m, 'next'));
    const build = join(tempDir('npu-fleet-builds-'), 'b7');
    mkdirSync(build);
    symlinkSync(build, join(m, 'candidate'));
    lines.length = 0;
    expect(validateModelsCommand(dir, (l) => lines.push(l), 'onnx')).toBe(1);
    expect(lines.filter((l) => l.startsWith('FAIL')).map((l) => l.split(':')[0])).toEqual([`FAIL ${join(m, 'candidate')}`, `FAIL ${join(m, 'next')}`]);
  });
});

describe('npu-fleet models validate on outputs whose batch is not one leading row per item', () => {
  // The worker splits an output along its config's first -1 (size / gear values per item there).
  const repoWith = (outputs: Record<'flatten' | 'transpose', string>): string => {
    const dir = tempDir('npu-fleet-validate-axis-');
    for (const [name, dims] of Object.entries(outputs)) {
      mkdirSync(join(dir, name, '1'), { recursive: true });
      const width = name === 'flatten' ? 4 : 3;
      writeFileSync(join(dir, name, 'config.yaml'), `name: ${name}\ninputs: [{name: x, dtype: float32, dims: [-1, ${width}]}]\noutputs: [{name: y, dtype: float32, dims: ${dims}}]\nbatchGears: [1, 2, 4]\nmaxBatchSize: 4\n`);
      (name === 'flatten' ? flattenModel : transposeModel)(join(dir, name, '1', 'model.onnx'));
    }
    return dir;
  };

  it('--load passes a flattened [-1] and a transposed [3, -1] output', async () => {
    process.env.NPU_FLEET_DEVICE = 'sim';
    const dir = repoWith({ flatten: '[-1]', transpose: '[3, -1]' });
    expect(validateModelsCommand(dir, () => {}, 'onnx')).toBe(0);
    const lines: string[] = [];
    expect(await loadCheckModelsCommand(dir, 0, (l) => lines.push(l))).toBe(0);
    expect(lines.at(-1)).toMatch(/^2 version\(s\) loaded, 0 failed/);
  });

  it('fails a transposed output configured with its batch on axis 0, naming the output and the dims to write', async () => {
    process.env.NPU_FLEET_DEVICE = 'sim';
    const dir = repoWith({ flatten: '[-1]', transpose: '[-1, 3]' });
    expect(validateModelsCommand(dir, () => {}, 'onnx')).toBe(0); // the static check cannot see it
    const lines: string[] = [];
    expect(await loadCheckModelsCommand(dir, 0, (l) => lines.push(l))).toBe(1);
    expect(lines.find((l) => l.startsWith('FAIL'))).toMatch(
      /^FAIL transpose@1: .*outputs\[0\] y: config\.yaml puts the batch \(its first -1\) on axis 0 of \[-1, 3\], where the model's \[3, -1\] is fixed: mark the model's batch axis, e\.g\. dims \[3, -1\]/,
    );
  });

  it('fails an output without a -1 statically, naming it', () => {
    const dir = repoWith({ flatten: '[8]', transpose: '[3, -1]' });
    const lines: string[] = [];
    expect(validateModelsCommand(dir, (l) => lines.push(l), 'onnx')).toBe(1);
    expect(lines.join('\n')).toMatch(/FAIL .*flatten.*outputs\[0\]\.dims: output y \[8\] has no -1: mark with -1 the axis that grows with the batch/);
  });
});
