import { afterEach, describe, expect, it } from 'vitest';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { request, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});

describe('a request delivered again while its first delivery is on the device', () => {
  it('takes the result of the run under way: one device run, both deliveries answered', async () => {
    h = await startWorker(snapshotOf('1'));
    const { producer, executions, results } = h;
    await producer.publish(request('twice', 0));
    await until(() => executions.length === 1, 2000, 'the first delivery on the device');
    await producer.publish(request('twice', 0)); // a redelivery, e.g. after a rebalance
    await new Promise((r) => setTimeout(r, 200));
    expect(executions).toHaveLength(1);
    executions[0]?.release();
    await until(() => (results.get('twice')?.length ?? 0) === 2, 2000, 'both deliveries answered');
    expect(results.get('twice')?.map((r) => r.status)).toEqual(['ok', 'ok']);
    expect(executions).toHaveLength(1);
  });

  it('a second delivery naming another replyTo (a retry from another client) gets its result there, not on the first one\'s', async () => {
    h = await startWorker(snapshotOf('1'));
    const { producer, executions, results } = h;
    const elsewhere: ResultEnvelope[] = [];
    await producer.subscribeReplies('other.replies', (r) => elsewhere.push(r));
    await producer.publish(request('retried', 0, { meta: { client: 'a' } }));
    await until(() => executions.length === 1, 2000, 'the first delivery on the device');
    await producer.publish(request('retried', 0, { replyTo: 'other.replies', meta: { client: 'b' } }));
    await new Promise((r) => setTimeout(r, 200));
    executions[0]?.release();
    await until(() => elsewhere.length === 1, 2000, 'the retry answered on its own replyTo');
    await until(() => (results.get('retried')?.length ?? 0) === 1, 2000, 'the first delivery answered');
    await new Promise((r) => setTimeout(r, 100));
    expect(results.get('retried')).toHaveLength(1);
    // Each client gets its own meta back (what it correlates by), with the shared outputs.
    expect(elsewhere.map((r) => [r.id, r.status, r.meta])).toEqual([['retried', 'ok', { client: 'b' }]]);
    expect(results.get('retried')?.map((r) => r.meta)).toEqual([{ client: 'a' }]);
    expect(elsewhere[0]?.outputs).toEqual(results.get('retried')?.[0]?.outputs);
    expect(executions).toHaveLength(1);
  });

  it('a delivery pinned to another version is not taken for a duplicate', async () => {
    h = await startWorker(snapshotOf('1', '2'));
    const { producer, executions, results } = h;
    await producer.publish(request('pin', 0, { version: '1' }));
    await until(() => executions.length === 1, 2000, 'the first delivery on the device');
    await producer.publish(request('pin', 0, { version: '2' }));
    await until(() => executions.length === 2, 2000, 'the other version run too');
    for (const e of executions) e.release();
    await until(() => (results.get('pin')?.length ?? 0) === 2, 2000, 'both answered');
    expect(results.get('pin')?.map((r) => r.version).sort()).toEqual(['1', '2']);
  });
});
