import { afterEach, describe, expect, it } from 'vitest';
import { request, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});

/** A full batch (32 samples, the largest gear) of bulk work: ready to go at once. */
const fullBulk = (id: string) =>
  request(id, 2, { version: '1', inputs: [{ name: 'input', dtype: 'float32', shape: [32, 64], data: new Uint8Array(32 * 64 * 4) }] });

describe('one scheduling pass over lanes with work ready', () => {
  it('sends the lane with top-priority work first, whichever lane the rotation starts at', async () => {
    h = await startWorker(snapshotOf('1'));
    const first: number[] = [];
    for (let round = 0; round < 4; round++) {
      const before = h.executions.length;
      // Both ready at the same instant, in two lanes: bulk pinned to version 1, urgent in the default lane.
      await h.producer.publish([fullBulk(`bulk-${round}`), request(`urgent-${round}`, 0)]);
      await until(() => h!.executions.length > before, 2000, 'a batch on the device');
      first.push(h.executions[before]?.gear as number);
      // Let everything of this round finish before the next.
      await until(() => {
        for (const e of h!.executions) e.release();
        return h!.results.has(`bulk-${round}`) && h!.results.has(`urgent-${round}`);
      }, 3000, 'the round answered');
    }
    // The urgent request runs in gear 1; a bulk batch of 32 ahead of it is a priority inversion.
    expect(first).toEqual([1, 1, 1, 1]);
  });
});
