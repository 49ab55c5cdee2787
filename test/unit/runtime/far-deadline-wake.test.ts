import { afterEach, describe, expect, it } from 'vitest';
import { request, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
const warnings: Error[] = [];
const onWarning = (w: Error): void => void warnings.push(w);
afterEach(async () => {
  process.off('warning', onWarning);
  await stopWorker(h);
  h = undefined;
});

describe('a deadline further out than a timer can wait (2^31 - 1 ms, about 24.8 days)', () => {
  it('arms no overflowing timer: no 1 ms wake loop, no TimeoutOverflowWarning', async () => {
    h = await startWorker(snapshotOf('1'));
    await h.producer.publish(request('first', 1));
    await until(() => h!.executions.length === 1, 2000, 'the first batch on the device');
    // Top-priority work goes to the busy device at once (a batch past its estimate keeps it busy).
    await h.producer.publish(request('second', 0));
    await until(() => h!.executions.length === 2, 2000, 'the second slot taken');
    process.on('warning', onWarning);
    // Both slots are busy: the worker wakes for the queued request's deadline, 40 days out.
    await h.producer.publish(request('patient', 1, { deadlineAt: Date.now() + 40 * 86_400_000 }));
    await new Promise((r) => setTimeout(r, 200));
    expect(warnings.filter((w) => w.name === 'TimeoutOverflowWarning').map((w) => w.message)).toEqual([]);
    for (const e of h.executions) e.release();
    await until(() => h!.executions.length === 3, 2000, 'the patient request on the device');
    h.executions[2]?.release();
    await until(() => h!.results.has('patient'), 2000, 'the patient request served');
    expect(h.results.get('patient')).toMatchObject([{ status: 'ok' }]);
  });
});
