// `npu-fleet publish --file`: a line its model's config.yaml refuses (input name, dtype, shape,
// samples past the largest gear) is recorded invalid, naming the line, and not sent, when the model
// repository is at hand; sent, it came back invalid from a worker without its line, and each
// --resume sent it again (another dead-letter copy each time). With the repository elsewhere (a
// client on another machine) the check is skipped and the lines go out. Real Redis (BullMQ), no
// worker: the queue shows what was sent.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { main } from '../../../src/cli/main.ts';
import { captureCliOutput } from '../../helpers/capture-cli-output.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { bullmqSettings, queueJobs } from '../transport/bullmq-harness.ts';

const MODEL = 'affine';
const { stdout, stderr } = captureCliOutput();

function writeRepository(dir: string): void {
  mkdirSync(join(dir, MODEL), { recursive: true });
  writeFileSync(
    join(dir, MODEL, 'config.yaml'),
    stringify({ name: MODEL, inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }], outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 4] }], maxBatchSize: 8, batchGears: [1, 2, 4], priorityLevels: 2 }),
  );
}

const line = (id: string, rows: number, cols = 4, extra: { name?: string; dtype?: string } = {}): string =>
  JSON.stringify({ id, model: MODEL, inputs: [{ name: extra.name ?? 'x', dtype: extra.dtype ?? 'float32', shape: [rows, cols], data: Buffer.alloc(rows * cols * 4).toString('base64') }] });

const BAD = [line('bad-name', 1, 4, { name: 'input' }), line('bad-dtype', 1, 4, { dtype: 'int32' }), line('bad-shape', 1, 3), line('too-many', 6)];

/** A fleet config on a fresh BullMQ prefix; the repository at `repository`. */
function fleet(dir: string, repository: string): { configFile: string; prefix: string } {
  const prefix = uniqueName('pubfit');
  const configFile = join(dir, `fleet-${prefix}.yaml`);
  writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix, connectTimeoutMs: 5_000 } }, modelRepository: repository, models: [MODEL], log: { level: 'warn' } }));
  return { configFile, prefix };
}

const queued = async (prefix: string): Promise<string[]> =>
  (await queueJobs(bullmqSettings({ prefix }), `${MODEL}.requests`, ['wait', 'prioritized'])).map((j) => j.id ?? '').sort();

describe('npu-fleet publish --file: lines the model config refuses', () => {
  it('are recorded invalid with their line and not sent; the good lines are', { timeout: 60_000 }, async () => {
    const dir = tempDir('npu-fleet-pubfit-');
    writeRepository(join(dir, 'models'));
    const { configFile, prefix } = fleet(dir, join(dir, 'models'));
    const data = join(dir, 'data.jsonl');
    // Lines 1 and 4 good; 2, 3, 5 and 6 refused by config.yaml.
    writeFileSync(data, `${[line('g1', 2), BAD[0], BAD[1], line('g2', 4), BAD[2], BAD[3]].join('\n')}\n`);
    expect(await main(['publish', '--config', configFile, '--file', data]), stderr.join('')).toBe(4);
    const printed = stdout.join('');
    expect(printed).toMatch(/published 2 request\(s\)/);
    const invalid = printed
      .split('\n')
      .filter((l) => l.includes('"status":"invalid"'))
      .map((l) => JSON.parse(l) as { id: string; error: { code: string; message: string } });
    expect(invalid.map((r) => [r.id, r.error.code, r.error.message.replace(/: .*/, '')])).toEqual([
      ['bad-name', 'INVALID_MESSAGE', 'line 2'],
      ['bad-dtype', 'INVALID_MESSAGE', 'line 3'],
      ['bad-shape', 'INVALID_MESSAGE', 'line 5'],
      ['too-many', 'INVALID_MESSAGE', 'line 6'],
    ]);
    expect(invalid[2]?.error.message).toBe(
      `line 5: inputs[0].shape[1]: input "x" needs 4 here (dims [-1,4]), got 3; not sent: ${join(dir, 'models', MODEL, 'config.yaml')} refuses it, as the model's workers would`,
    );
    expect(invalid[3]?.error.message).toMatch(/^line 6: inputs\[0\]\.shape\[0\]: 6 samples exceed the largest batch gear 4 of affine/);
    expect(await queued(prefix)).toEqual(['g1', 'g2']);
  });

  it('--await --out and --resume: each run records them invalid and sends none of them', { timeout: 60_000 }, async () => {
    const dir = tempDir('npu-fleet-pubfit-resume-');
    writeRepository(join(dir, 'models'));
    const { configFile, prefix } = fleet(dir, join(dir, 'models'));
    const data = join(dir, 'data.jsonl');
    writeFileSync(data, `${BAD.join('\n')}\n`);
    const out = join(dir, 'results.jsonl');
    expect(await main(['publish', '--config', configFile, '--file', data, '--await', '--out', out, '--timeout-ms', '5000']), stderr.join('')).toBe(4);
    expect(await main(['publish', '--config', configFile, '--file', data, '--await', '--out', out, '--resume', '--timeout-ms', '5000']), stderr.join('')).toBe(4);
    const records = readFileSync(out, 'utf8')
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => JSON.parse(l) as { id: string; status: string; error?: { message: string } });
    expect(records.map((r) => r.status)).toEqual(Array<string>(8).fill('invalid'));
    expect(records.every((r) => /^line [1-4]: inputs\[0\]\./.test(r.error?.message ?? ''))).toBe(true);
    expect(await queued(prefix)).toEqual([]);
  });

  it('are sent, unchecked and unsaid, when the model repository is not at hand (a client on another machine)', { timeout: 60_000 }, async () => {
    const dir = tempDir('npu-fleet-pubfit-elsewhere-');
    const { configFile, prefix } = fleet(dir, join(dir, 'not-here'));
    const data = join(dir, 'data.jsonl');
    writeFileSync(data, `${[line('g1', 2), ...BAD].join('\n')}\n`);
    expect(await main(['publish', '--config', configFile, '--file', data]), stderr.join('')).toBe(0);
    expect(stdout.join('')).toMatch(/published 5 request\(s\)/);
    expect(stderr.join('')).not.toMatch(/not-here/);
    expect(await queued(prefix)).toEqual(['bad-dtype', 'bad-name', 'bad-shape', 'g1', 'too-many']);
  });
});
