// A version directory copied in without the hidden-name-and-rename step, by a copy that stalls
// longer than the settle time (a slow network source): the poll sees half a model file.
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { RunningWorker } from '../../../src/runtime/worker-process.ts';
import { until } from '../../helpers/until.ts';
import { fleetOnCopiedRepo, MODEL } from './reload-fleet.ts';

let worker: RunningWorker | undefined;
afterEach(async () => {
  await worker?.stop();
  worker = undefined;
});

describe('hot reload of a version whose model file is copied in with a stall', () => {
  it('half a file is refused (not served), and the whole file, once the copy ends, is loaded and served', async () => {
    const f = await fleetOnCopiedRepo();
    worker = f.running;
    expect(await f.ask()).toMatchObject({ status: 'ok', version: '1' });
    const bytes = readFileSync(join(f.repo, MODEL, '1', 'model.onnx'));
    const file = join(f.repo, MODEL, '2', 'model.onnx');
    mkdirSync(join(f.repo, MODEL, '2'));
    writeFileSync(file, bytes.subarray(0, Math.floor(bytes.length / 2)));
    // Stalled past the settle time and a poll or two.
    await new Promise((r) => setTimeout(r, 2_500));
    expect(await f.ask()).toMatchObject({ status: 'ok', version: '1' });
    appendFileSync(file, bytes.subarray(Math.floor(bytes.length / 2)));
    await until(() => f.lines.some((l) => l.msg === 'model version loaded' && l.version === '2'), 20_000, 'version 2 to load once whole');
    let r = await f.ask();
    for (let i = 0; i < 20 && r.version !== '2'; i++) r = await f.ask();
    expect(r).toMatchObject({ status: 'ok', version: '2' });
    // What the worker did with the half file: refused it (or had not tried it yet), never served it.
    for (const l of f.failures()) expect(l).toMatchObject({ version: '2', serving: '1', err: { code: 'MODEL_LOAD_FAILED' } });
    await f.producer.close();
  }, 60_000);
});
