import { afterEach, describe, expect, it } from 'vitest';
import { modelConfig, request, snapshotWith, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('execTimeoutMs counts from when a batch starts on the device', () => {
  it('the second batch in flight is not late for the time it waited behind the first', async () => {
    h = await startWorker(snapshotWith({ ...modelConfig, execTimeoutMs: 300 }, '1'));
    await h.producer.publish(request('first', 1));
    await until(() => h!.executions.length === 1, 2000, 'the first batch on the device');
    // Top-priority work goes to the busy device at once: the second slot fills.
    await h.producer.publish(request('second', 0));
    await until(() => h!.executions.length === 2, 2000, 'the second batch dispatched behind the first');
    const secondAt = Date.now();
    await sleep(200);
    h.executions[0]?.release(); // the first ran 200 ms: within execTimeoutMs
    await sleep(200);
    h.executions[1]?.release(); // the second ran 200 ms after it, 400 ms after its dispatch
    expect(Date.now() - secondAt).toBeGreaterThan(300);
    await until(() => h!.results.has('first') && h!.results.has('second'), 2000, 'both answered');
    expect(h.results.get('first')).toMatchObject([{ status: 'ok' }]);
    expect(h.results.get('first')?.[0]?.late).toBeUndefined();
    expect(h.results.get('second')).toMatchObject([{ status: 'ok' }]);
    expect(h.results.get('second')?.[0]?.late).toBeUndefined();
    expect(h.lines.filter((l) => l.msg === 'batch overran execTimeoutMs; letting it finish')).toEqual([]);
  });

  it('a batch that runs past execTimeoutMs after the one ahead of it finished is still late', async () => {
    h = await startWorker(snapshotWith({ ...modelConfig, execTimeoutMs: 300 }, '1'));
    await h.producer.publish(request('first', 1));
    await until(() => h!.executions.length === 1, 2000, 'the first batch on the device');
    await h.producer.publish(request('second', 0));
    await until(() => h!.executions.length === 2, 2000, 'the second batch dispatched behind the first');
    await sleep(100);
    h.executions[0]?.release();
    await sleep(400);
    h.executions[1]?.release();
    await until(() => h!.results.has('second'), 2000, 'the second answered');
    expect(h.results.get('first')?.[0]?.late).toBeUndefined();
    expect(h.results.get('second')).toMatchObject([{ status: 'ok', late: true }]);
  });

  it('a batch behind one that failed at once still waits for the batch on the device before its clock starts', async () => {
    h = await startWorker(snapshotWith({ ...modelConfig, execTimeoutMs: 300 }, '1'));
    await h.producer.publish(request('first', 1));
    await until(() => h!.executions.length === 1, 2000, 'the first batch on the device');
    await h.producer.publish(request('second', 0));
    await until(() => h!.executions.length === 2, 2000, 'the second batch behind it');
    h.executions[1]?.fail(new Error('refused at once'));
    await until(() => h!.results.has('second'), 2000, 'the second answered failed');
    await h.producer.publish(request('third', 0));
    await until(() => h!.executions.length === 3, 2000, 'the third batch behind the first');
    await sleep(350);
    h.executions[0]?.release(); // the first ran 350 ms: late; the third has not started
    await sleep(100);
    h.executions[2]?.release(); // the third ran 100 ms
    await until(() => h!.results.has('third'), 2000, 'the third answered');
    expect(h.results.get('first')).toMatchObject([{ status: 'ok', late: true }]);
    expect(h.results.get('third')).toMatchObject([{ status: 'ok' }]);
    expect(h.results.get('third')?.[0]?.late).toBeUndefined();
  });
});
