// `npu-fleet publish --file DATA.jsonl --await --out RESULTS.jsonl`: scoring a data set through a
// real worker on a real Kafka and a real Redis (BullMQ). Every good line gets its one ok result
// with the model's outputs; every bad line gets an invalid record naming it; the run goes on. A
// run cut off (the results file truncated mid-line, as a crash leaves it) is finished by
// `--resume`, which sends only what has no ok result yet.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { stringify } from 'yaml';
import type { z } from 'zod';
import { main } from '../../../src/cli/main.ts';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { TransportSettingsSchema } from '../../../src/contracts/fleet-config.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { runWorker } from '../../../src/runtime/worker-process.ts';
import { captureCliOutput } from '../../helpers/capture-cli-output.ts';
import { getServices, uniqueKafkaTransport, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { writeAffineVersion } from '../../helpers/affine-model.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';
const MODEL = 'affine';
const GOOD = 300;
const log = createLogger({ level: 'warn' });

/** y = 2x + 1 over [batch, 4]: exact in float32 for the small integers used here. */
function writeRepository(dir: string): void {
  mkdirSync(join(dir, MODEL), { recursive: true });
  writeFileSync(
    join(dir, MODEL, 'config.yaml'),
    stringify({ name: MODEL, inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }], outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 4] }], maxBatchSize: 8, batchGears: [1, 2, 4, 8], priorityLevels: 2, maxQueueDelayMs: [1, 2] }),
  );
  writeAffineVersion(join(dir, MODEL), '1', 2, 1);
}

const rowsOf = (i: number): number => 1 + (i % 3);
const inputOf = (i: number): Float32Array => Float32Array.from({ length: rowsOf(i) * 4 }, (_, k) => ((i * 7 + k * 13) % 41) - 20);
const b64 = (a: Float32Array): string => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64');
const line = (id: string, x: Float32Array, rows: number, extra: Record<string, unknown> = {}): string =>
  JSON.stringify({ id, model: MODEL, inputs: [{ name: 'x', dtype: 'float32', shape: [rows, 4], data: b64(x) }], ...extra });

interface Rec {
  id: string;
  status: string;
  error?: { code: string; message: string };
  outputs?: Array<{ name: string; shape: number[]; data: string }>;
}
const records = (path: string): Rec[] =>
  readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .flatMap((l) => {
      try {
        return [JSON.parse(l) as Rec];
      } catch {
        return [];
      }
    });

const { stderr, cleanup } = captureCliOutput();

/** A worker serving MODEL from a fresh repository under `prefix`, stopped after the test; its config file. */
async function servedFleet(prefix: string, transport: z.input<typeof TransportSettingsSchema>): Promise<{ dir: string; configFile: string }> {
  const dir = tempDir(prefix);
  writeRepository(join(dir, 'models'));
  const fleet = { transport, devices: { count: 1, backend: 'sim' }, modelRepository: join(dir, 'models'), models: [MODEL], worker: { metricsPort: 0 }, log: { level: 'warn' } };
  const configFile = join(dir, 'fleet.yaml');
  writeFileSync(configFile, stringify(fleet));
  const worker = await runWorker(parseFleetConfig(fleet), 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
  cleanup.push(() => worker.stop());
  return { dir, configFile };
}

const setups: Array<{ name: string; transport: () => z.input<typeof TransportSettingsSchema> }> = [
  { name: 'Kafka', transport: () => uniqueKafkaTransport('pubfile') },
  { name: 'BullMQ', transport: () => ({ kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('pubfile') } }) },
];

describe.each(setups)('npu-fleet publish --file DATA.jsonl --await --out on $name', (setup) => {
  it('scores every good line once with the model outputs, records each bad line as invalid, and --resume finishes a cut-off run', { timeout: 180_000 }, async () => {
    const { dir, configFile } = await servedFleet('npu-fleet-pubfile-', setup.transport());

    const good = Array.from({ length: GOOD }, (_, i) => `g${i}`);
    const lines = good.map((id, i) => line(id, inputOf(i), rowsOf(i), { priority: i % 2 }));
    // Bad lines between good ones: not JSON; an id used before; a priority the model lacks; a
    // shape the model refuses (its config.yaml is at hand: refused before sending, naming the line,
    // where the worker's invalid result named none and each --resume sent it again).
    lines.splice(10, 0, '{"id": "broken"');
    lines.splice(50, 0, line('g3', inputOf(3), rowsOf(3)));
    lines.splice(90, 0, line('too-low', inputOf(1), rowsOf(1), { priority: 5 }));
    lines.splice(130, 0, line('wide', new Float32Array(5), 1).replace('[1,4]', '[1,5]'));
    const data = join(dir, 'data.jsonl');
    writeFileSync(data, `${lines.join('\n')}\n`);
    const out = join(dir, 'results.jsonl');
    const publish = (...extra: string[]): Promise<number> => main(['publish', '--config', configFile, '--file', data, '--await', '--out', out, '--in-flight', '64', '--timeout-ms', '60000', ...extra]);

    // Some lines were bad: exit 4 (not every request answered ok), and a summary of the run on stderr.
    expect(await publish(), stderr.join('')).toBe(4);
    expect(stderr.join('')).toMatch(new RegExp(`publish: ${GOOD + 4} read, ${GOOD} published, ${GOOD} ok, 4 refused before sending \\(invalid\\); records in `));
    const first = records(out);
    expect(first).toHaveLength(GOOD + 4);
    const byId = new Map(first.map((r) => [r.id, r]));
    good.forEach((id, i) => {
      const r = byId.get(id);
      expect(r?.status, id).toBe('ok');
      const x = inputOf(i);
      const y = new Float32Array(Uint8Array.from(Buffer.from(r?.outputs?.[0]?.data ?? '', 'base64')).buffer);
      expect(r?.outputs?.[0]?.shape, id).toEqual([rowsOf(i), 4]);
      expect(Array.from(y), id).toEqual(Array.from(x, (v) => 2 * v + 1));
    });
    const invalid = first.filter((r) => r.status === 'invalid');
    const messages = invalid.map((r) => r.error?.message ?? '');
    expect(invalid).toHaveLength(4);
    for (const re of [/^line 11 is not JSON: /, /^line 51: id "g3" repeats line 4; ids must be unique/, /^line 91: priority must be from 0 to 1: model affine has 2 priority levels, got 5/]) {
      expect(messages.some((m) => re.test(m)), `${String(re)} in\n${messages.join('\n')}`).toBe(true);
    }
    expect(byId.get('wide')).toMatchObject({ status: 'invalid', error: { code: 'INVALID_MESSAGE' } });
    expect(byId.get('wide')?.error?.message).toMatch(/^line 131: inputs\[0\]\.shape\[1\]: input "x" needs 4 here .*; not sent: .*config\.yaml refuses it/);

    // A crash after some records: the file ends mid-line. --resume sends only the ids without an
    // ok result (the bad lines are judged again) and leaves one ok result per id.
    const keep = first.slice(0, 120);
    const okKept = new Set(keep.filter((r) => r.status === 'ok').map((r) => r.id));
    writeFileSync(out, `${keep.map((r) => JSON.stringify(r)).join('\n')}\n{"id":"g29`);
    stderr.splice(0);
    expect(await publish('--resume'), stderr.join('')).toBe(4);
    const text = stderr.join('');
    expect(text).toMatch(new RegExp(`${GOOD - okKept.size} published, ${GOOD - okKept.size} ok, .*${okKept.size} skipped \\(ok in the file before\\)`));
    expect(text).toMatch(/1 line\(s\) of .*results\.jsonl were not results \(cut off by a crash\?\) and were ignored/);
    const finalOk = records(out).filter((r) => r.status === 'ok');
    expect(finalOk.map((r) => r.id).sort()).toEqual([...good].sort());

    // The same file again without --resume is refused: it holds results already paid for.
    stderr.splice(0);
    expect(await publish(), stderr.join('')).toBe(2);
    expect(stderr.join('')).toMatch(/--out .*results\.jsonl exists: add --resume to continue it/);
  });

  it('--resume of a data set edited since (a line removed): no line left undone for a line number recorded done (resumes by id, saying so)', { timeout: 120_000 }, async () => {
    const { dir, configFile } = await servedFleet('npu-fleet-pubfile-edit-', setup.transport());
    const ids = Array.from({ length: 40 }, (_, i) => `e${i}`);
    const data = join(dir, 'data.jsonl');
    const out = join(dir, 'results.jsonl');
    const publish = (...extra: string[]): Promise<number> => main(['publish', '--config', configFile, '--file', data, '--await', '--out', out, '--in-flight', '8', '--timeout-ms', '60000', ...extra]);
    writeFileSync(data, `${ids.map((id, i) => line(id, inputOf(i), rowsOf(i))).join('\n')}\n`);
    expect(await publish(), stderr.join('')).toBe(0);
    // Cut off after 20 records; then line 3 is taken out of the data set, so every later line moves up one.
    writeFileSync(out, `${records(out).slice(0, 20).map((r) => JSON.stringify(r)).join('\n')}\n`);
    const edited = ids.filter((id) => id !== 'e2');
    writeFileSync(data, `${edited.map((id) => line(id, inputOf(ids.indexOf(id)), rowsOf(ids.indexOf(id)))).join('\n')}\n`);
    stderr.splice(0);
    expect(await publish('--resume'), stderr.join('')).toBe(0);
    const ok = new Set(records(out).filter((r) => r.status === 'ok').map((r) => r.id));
    expect(edited.filter((id) => !ok.has(id))).toEqual([]);
    expect(stderr.join('')).toMatch(/data\.jsonl does not hold the ids .*results\.jsonl recorded for its lines \(edited since\?\): resuming by id/);
  });

  it('--resume of a data set with a line done and a line not done swapped since, then swapped back: each id gets one ok result, none lost, none sent twice', { timeout: 120_000 }, async () => {
    const { dir, configFile } = await servedFleet('npu-fleet-pubfile-swap-', setup.transport());
    const ids = Array.from({ length: 40 }, (_, i) => `s${i}`);
    const data = join(dir, 'data.jsonl');
    const out = join(dir, 'results.jsonl');
    const publish = (...extra: string[]): Promise<number> => main(['publish', '--config', configFile, '--file', data, '--await', '--out', out, '--in-flight', '8', '--timeout-ms', '60000', ...extra]);
    const write = (order: readonly string[]): void => writeFileSync(data, `${order.map((id) => line(id, inputOf(ids.indexOf(id)), rowsOf(ids.indexOf(id)))).join('\n')}\n`);
    write(ids);
    expect(await publish(), stderr.join('')).toBe(0);
    // Cut off after 20 records; then one line recorded done and one not are swapped. Resumed by
    // line unchecked, the done line's number would skip the id now on it (never answered) and the
    // other line would send the id answered already.
    const kept = (records(out) as Array<Rec & { line: number }>).slice(0, 20);
    writeFileSync(out, `${kept.map((r) => JSON.stringify(r)).join('\n')}\n`);
    const doneLines = new Set(kept.map((r) => r.line));
    const doneLine = Math.min(...doneLines);
    const openLine = ids.findIndex((_, i) => !doneLines.has(i + 1)) + 1;
    const swapped = [...ids];
    [swapped[doneLine - 1], swapped[openLine - 1]] = [ids[openLine - 1] as string, ids[doneLine - 1] as string];
    write(swapped);
    stderr.splice(0);
    expect(await publish('--resume'), stderr.join('')).toBe(0);
    const okIds = records(out)
      .filter((r) => r.status === 'ok')
      .map((r) => r.id)
      .sort();
    expect(okIds).toEqual([...ids].sort());
    expect(stderr.join('')).toMatch(/data\.jsonl does not hold the ids .*results\.jsonl recorded for its lines \(edited since\?\): resuming by id/);

    // Swapped back, and resumed again (some lines of a long run may still be undone): the line
    // done first holds the id first recorded for it again, but the id now on the other line was
    // answered by the run before, at the first line's number.
    write(ids);
    stderr.splice(0);
    expect(await publish('--resume'), stderr.join('')).toBe(0);
    const okAfter = records(out)
      .filter((r) => r.status === 'ok')
      .map((r) => r.id)
      .sort();
    expect(okAfter).toEqual([...ids].sort());
    expect(stderr.join('')).toMatch(/results\.jsonl records more than one id for 1 line\(s\) of .*data\.jsonl \(edited between runs\): resuming by id/);
  });

  it('two runs on one RESULTS at once: the second is refused before it reads or sends anything, so no line is answered twice', { timeout: 120_000 }, async () => {
    const { dir, configFile } = await servedFleet('npu-fleet-pubfile-twice-', setup.transport());
    const ids = Array.from({ length: 40 }, (_, i) => `t${i}`);
    const data = join(dir, 'data.jsonl');
    const out = join(dir, 'results.jsonl');
    writeFileSync(data, `${ids.map((id, i) => line(id, inputOf(i), rowsOf(i))).join('\n')}\n`);
    // A run cut off before its first record; resumed twice at once (a second terminal, an
    // overlapping cron job): each would send every line.
    writeFileSync(out, '');
    const publish = (): Promise<number> => main(['publish', '--config', configFile, '--file', data, '--await', '--out', out, '--resume', '--in-flight', '8', '--timeout-ms', '60000']);
    const codes = await Promise.all([publish(), publish()]);
    const okIds = records(out)
      .filter((r) => r.status === 'ok')
      .map((r) => r.id)
      .sort();
    expect(okIds).toEqual([...ids].sort());
    expect([...codes].sort()).toEqual([0, 2]);
    expect(stderr.join('')).toMatch(/--out .*results\.jsonl is being written by another run \(process \d+ on /);
    // Its lock is gone with the run: the file can be resumed again.
    stderr.splice(0);
    expect(await publish(), stderr.join('')).toBe(0);
    expect(stderr.join('')).toMatch(/40 skipped \(ok in the file before\)/);
  });
});

describe('npu-fleet publish --file on Kafka where the model repository is not at hand', () => {
  it('a line whose priority no worker reads is recorded invalid, naming the line; the rest of its chunk is sent and answered', { timeout: 120_000 }, async () => {
    const dir = tempDir('npu-fleet-pubfile-prio-');
    writeRepository(join(dir, 'models'));
    const transport = uniqueKafkaTransport('pubprio');
    const fleet = { transport, devices: { count: 1, backend: 'sim' }, modelRepository: join(dir, 'models'), models: [MODEL], worker: { metricsPort: 0 }, log: { level: 'warn' } };
    // The worker serves priorities 0 and 1 (its topics exist); publish runs where the repository is not.
    const worker = await runWorker(parseFleetConfig(fleet), 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
    cleanup.push(() => worker.stop());
    const configFile = join(dir, 'fleet.yaml');
    writeFileSync(configFile, stringify({ ...fleet, modelRepository: join(dir, 'elsewhere') }));

    const lines = Array.from({ length: 6 }, (_, i) => line(`p${i}`, inputOf(i), rowsOf(i), { priority: i % 2 }));
    lines.splice(3, 0, line('too-low', inputOf(1), rowsOf(1), { priority: 5 }));
    const data = join(dir, 'data.jsonl');
    writeFileSync(data, `${lines.join('\n')}\n`);
    const out = join(dir, 'results.jsonl');
    expect(await main(['publish', '--config', configFile, '--file', data, '--await', '--out', out, '--timeout-ms', '60000']), stderr.join('')).toBe(4);
    const recs = records(out);
    expect(recs.filter((r) => r.status === 'ok').map((r) => r.id).sort()).toEqual(['p0', 'p1', 'p2', 'p3', 'p4', 'p5']);
    const bad = recs.filter((r) => r.status !== 'ok');
    expect(bad).toHaveLength(1);
    expect(bad[0]).toMatchObject({ id: 'too-low', status: 'invalid', error: { code: 'INVALID_ARGUMENT' } });
    expect(bad[0]?.error?.message).toMatch(/^line 4: priority 5 of model affine: no worker reads .*topics exist for priorities 0, 1 /);

    // Fire and forget: the good lines go out, the bad one is an invalid line on stdout, exit 4.
    const printed: string[] = [];
    vi.mocked(process.stdout.write).mockImplementation((chunk) => (printed.push(String(chunk)), true));
    stderr.splice(0);
    expect(await main(['publish', '--config', configFile, '--file', data]), stderr.join('')).toBe(4);
    expect(printed.join('')).toMatch(/published 6 request\(s\)/);
    expect(printed.join('')).toMatch(/"id":"too-low","status":"invalid".*line 4: priority 5/);
  });
});

describe('npu-fleet publish --file --out --resume on BullMQ, RESULTS saved by an editor since', () => {
  // "UTF-8 with BOM" puts U+FEFF before the first record: read as part of it, that record was not
  // JSON, and --resume sent its line again (a second ok record, device time paid twice).
  it('a byte order mark before the first record: every line done is skipped, none is sent again', { timeout: 120_000 }, async () => {
    const { dir, configFile } = await servedFleet('npu-fleet-pubfile-bom-', { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('pubbom') } });
    const ids = Array.from({ length: 12 }, (_, i) => `b${i}`);
    const data = join(dir, 'data.jsonl');
    const out = join(dir, 'results.jsonl');
    writeFileSync(data, `${ids.map((id, i) => line(id, inputOf(i), rowsOf(i))).join('\n')}\n`);
    const publish = (...extra: string[]): Promise<number> => main(['publish', '--config', configFile, '--file', data, '--await', '--out', out, '--timeout-ms', '60000', ...extra]);
    expect(await publish(), stderr.join('')).toBe(0);
    expect(records(out).filter((r) => r.status === 'ok')).toHaveLength(12);
    writeFileSync(out, `\uFEFF${readFileSync(out, 'utf8').replace(/\n/g, '\r\n')}`);
    stderr.splice(0);
    expect(await publish('--resume'), stderr.join('')).toBe(0);
    expect(stderr.join('')).toMatch(/12 skipped \(ok in the file before\)/);
    // One record per id, the first still behind its mark.
    const ok = readFileSync(out, 'utf8').replace(/^\uFEFF/, '').split('\n').filter((l) => l.trim() !== '').map((l) => (JSON.parse(l) as Rec).id);
    expect(ok.sort()).toEqual([...ids].sort());
  });
});
