// Two data sets that number their lines alike (ids 1, 2, 3... in train.jsonl and in test.jsonl),
// scored one after the other, each to a fresh RESULTS. On BullMQ the answered jobs of the first
// are kept an hour (jobId = id), and the second run took their answers as its own: every line
// recorded `ok` with the first data set's outputs, exit 0, not a word on stderr. A fresh run now
// runs each of its lines; a --resume still takes an earlier ok answer for its id (docs: an ok
// result stands for its id). Kafka ran every line anyway; it is held to the same.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Queue } from 'bullmq';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import type { z } from 'zod';
import { main } from '../../../src/cli/main.ts';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { TransportSettingsSchema } from '../../../src/contracts/fleet-config.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { runWorker } from '../../../src/runtime/worker-process.ts';
import { writeAffineVersion } from '../../helpers/affine-model.ts';
import { captureCliOutput } from '../../helpers/capture-cli-output.ts';
import { getServices, uniqueKafkaTransport, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';
const MODEL = 'affine';
const LINES = 20;
const log = createLogger({ level: 'warn' });
const { stderr, cleanup } = captureCliOutput();

/** y = 2x + 1 over [batch, 4]: exact in float32 for the small integers used here. */
async function servedFleet(prefix: string, transport: z.input<typeof TransportSettingsSchema>, workerNow = true): Promise<{ dir: string; configFile: string; startWorker: () => Promise<void> }> {
  const dir = tempDir(prefix);
  const models = join(dir, 'models');
  mkdirSync(join(models, MODEL), { recursive: true });
  writeFileSync(
    join(models, MODEL, 'config.yaml'),
    stringify({ name: MODEL, inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }], outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 4] }], maxBatchSize: 8, batchGears: [1, 2, 4, 8], priorityLevels: 2, maxQueueDelayMs: [1, 2] }),
  );
  writeAffineVersion(join(models, MODEL), '1', 2, 1);
  const fleet = { transport, devices: { count: 1, backend: 'sim' }, modelRepository: models, models: [MODEL], worker: { metricsPort: 0 }, log: { level: 'warn' } };
  const configFile = join(dir, 'fleet.yaml');
  writeFileSync(configFile, stringify(fleet));
  const startWorker = async (): Promise<void> => {
    const worker = await runWorker(parseFleetConfig(fleet), 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
    cleanup.push(() => worker.stop());
  };
  if (workerNow) await startWorker();
  return { dir, configFile, startWorker };
}

const inputOf = (i: number, offset: number): Float32Array => Float32Array.from({ length: 4 }, (_, k) => i + k + offset);
const dataSet = (offset: number): string =>
  `${Array.from({ length: LINES }, (_, i) => {
    const x = inputOf(i, offset);
    return JSON.stringify({ id: String(i + 1), model: MODEL, inputs: [{ name: 'x', dtype: 'float32', shape: [1, 4], data: Buffer.from(x.buffer).toString('base64') }] });
  }).join('\n')}\n`;

interface Rec {
  id: string;
  status: string;
  error?: { code: string; message: string };
  line: number;
  outputs?: Array<{ data: string }>;
}
const records = (path: string): Rec[] =>
  readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Rec);
const outputOf = (r: Rec): number[] => Array.from(new Float32Array(Uint8Array.from(Buffer.from(r.outputs?.[0]?.data ?? '', 'base64')).buffer));

const setups: Array<{ name: string; transport: () => z.input<typeof TransportSettingsSchema> }> = [
  { name: 'Kafka', transport: () => uniqueKafkaTransport('reusedids') },
  { name: 'BullMQ', transport: () => ({ kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('reusedids') } }) },
];

describe.each(setups)('npu-fleet publish --file of a second data set reusing the first one\'s ids, on $name', (setup) => {
  it('a fresh --out gets the outputs of its own lines, not the answers to the earlier data set', { timeout: 120_000 }, async () => {
    const { dir, configFile } = await servedFleet('npu-fleet-reused-ids-', setup.transport());
    const publish = (data: string, out: string, ...extra: string[]): Promise<number> =>
      main(['publish', '--config', configFile, '--file', data, '--await', '--out', out, '--timeout-ms', '60000', ...extra]);
    const train = join(dir, 'train.jsonl');
    const test = join(dir, 'test.jsonl');
    writeFileSync(train, dataSet(0));
    writeFileSync(test, dataSet(100));

    expect(await publish(train, join(dir, 'train-results.jsonl')), stderr.join('')).toBe(0);
    expect(await publish(test, join(dir, 'test-results.jsonl')), stderr.join('')).toBe(0);
    const scored = records(join(dir, 'test-results.jsonl'));
    expect(scored).toHaveLength(LINES);
    for (const r of scored) {
      expect(r.status, r.id).toBe('ok');
      expect(outputOf(r), `line ${r.line}`).toEqual(Array.from(inputOf(r.line - 1, 100), (v) => 2 * v + 1));
    }

    // A resume of that RESULTS with its last records cut off: the lines without a record are sent
    // again and their ok answers (of this data set) taken; every line still has its own outputs.
    const out = join(dir, 'test-results.jsonl');
    writeFileSync(out, `${scored.slice(0, LINES / 2).map((r) => JSON.stringify(r)).join('\n')}\n`);
    stderr.splice(0);
    expect(await publish(test, out, '--resume'), stderr.join('')).toBe(0);
    const resumed = records(out);
    expect(resumed.map((r) => r.id).sort()).toEqual(scored.map((r) => r.id).sort());
    for (const r of resumed) expect(outputOf(r), `line ${r.line}`).toEqual(Array.from(inputOf(r.line - 1, 100), (v) => 2 * v + 1));
  });
});

describe('npu-fleet publish --file (fire and forget) on BullMQ of ids answered within the hour', () => {
  // BullMQ drops an add while an earlier job of its id is kept (jobId = id): the lines ran never,
  // their results went nowhere new, and the command said only "published 20 request(s)". Still
  // exit 0 (a retry of a failed publish meets its own earlier jobs), but stderr says it.
  it('says how many were not added because an earlier job holds their id', { timeout: 120_000 }, async () => {
    const { dir, configFile } = await servedFleet('npu-fleet-reused-ff-', { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('reusedff') } });
    const train = join(dir, 'train.jsonl');
    const test = join(dir, 'test.jsonl');
    writeFileSync(train, dataSet(0));
    writeFileSync(test, dataSet(100));
    expect(await main(['publish', '--config', configFile, '--file', train, '--await', '--out', join(dir, 'train-results.jsonl'), '--timeout-ms', '60000']), stderr.join('')).toBe(0);
    stderr.splice(0);
    expect(await main(['publish', '--config', configFile, '--file', test]), stderr.join('')).toBe(0);
    expect(stderr.join('')).toMatch(new RegExp(`npu-fleet: ${LINES} of the requests published were not added: BullMQ holds an earlier job of each id .*"1".*other requests need new ids to run`));
    // A file whose ids are new is published without the note.
    stderr.splice(0);
    writeFileSync(test, dataSet(100).replace(/"id":"/g, '"id":"new-'));
    expect(await main(['publish', '--config', configFile, '--file', test]), stderr.join('')).toBe(0);
    expect(stderr.join('')).not.toMatch(/were not added/);
  });
});

describe('npu-fleet publish --file --await on BullMQ while the first data set\'s jobs are still queued', () => {
  // A fresh run's lines met the first data set's queued jobs of their ids (BullMQ drops the adds)
  // and took those jobs' answers once a worker ran them: the other data set's outputs, recorded ok.
  it('records those lines failed ID_IN_USE, exit 4, naming the way out; a --resume once the first set is answered scores them on their own inputs', { timeout: 120_000 }, async () => {
    const prefix = uniqueName('reusedq');
    const { dir, configFile, startWorker } = await servedFleet('npu-fleet-reused-queued-', { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix } }, false);
    const train = join(dir, 'train.jsonl');
    const test = join(dir, 'test.jsonl');
    const out = join(dir, 'test-results.jsonl');
    writeFileSync(train, dataSet(0));
    writeFileSync(test, dataSet(100));
    // No worker yet: the first data set waits in the queue.
    expect(await main(['publish', '--config', configFile, '--file', train]), stderr.join('')).toBe(0);
    stderr.splice(0);
    expect(await main(['publish', '--config', configFile, '--file', test, '--await', '--out', out, '--timeout-ms', '20000'])).toBe(4);
    expect(stderr.join('')).toMatch(new RegExp(`${LINES} not run because BullMQ holds an earlier job of each id with other inputs, not yet answered .*--resume once those are answered, or give these lines new ids`));
    const refused = records(out);
    expect(refused).toHaveLength(LINES);
    for (const r of refused) expect(r.error?.code, r.id).toBe('ID_IN_USE');

    await startWorker();
    const queue = new Queue(`${MODEL}.requests`, { connection: { url: getServices().redisUrl }, prefix });
    cleanup.push(() => queue.close());
    const completed = async (): Promise<number> => (await queue.getJobCounts('completed'))['completed'] ?? 0;
    for (const end = Date.now() + 30_000; (await completed()) < LINES && Date.now() < end; ) await new Promise((r) => setTimeout(r, 100));
    expect(await completed()).toBe(LINES);

    stderr.splice(0);
    expect(await main(['publish', '--config', configFile, '--file', test, '--await', '--out', out, '--timeout-ms', '60000', '--resume']), stderr.join('')).toBe(0);
    const scored = records(out).filter((r) => r.status === 'ok');
    expect(scored).toHaveLength(LINES);
    for (const r of scored) expect(outputOf(r), `line ${r.line}`).toEqual(Array.from(inputOf(r.line - 1, 100), (v) => 2 * v + 1));
  });
});
