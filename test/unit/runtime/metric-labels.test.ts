import { afterEach, describe, expect, it } from 'vitest';
import { MODEL, request, snapshotOf, startWorker, until } from './fake-device-worker.ts';

type Harness = Awaited<ReturnType<typeof startWorker>>;
let h: Harness | undefined;
afterEach(async () => {
  await h?.worker.close();
  await h?.producer.close();
  h = undefined;
});

/** Every value the `model` label takes in the exposition. */
const modelLabels = (text: string): Set<string> => new Set([...text.matchAll(/model="([^"]*)"/g)].map((m) => m[1] as string));

describe('metric labels stay bounded whatever producers put in a message', () => {
  it('model names the worker does not serve (unknown or undecodable messages) are not label values', async () => {
    h = await startWorker(snapshotOf('1'));
    const { producer, results } = h;
    const n = 40;
    const { inputs: _inputs, ...ghost } = request('x', 1);
    await producer.publishRaw(
      Array.from({ length: n }, (_, i) => ({
        model: MODEL,
        // Valid for the codec, naming a model nobody serves: rejected UNKNOWN_MODEL.
        body: { ...ghost, id: `ghost-${i}`, model: `ghost-model-${i}`, inputs: [{ name: 'input', dtype: 'float32', shape: [1, 64], data: Buffer.alloc(256).toString('base64') }] },
      })),
    );
    await producer.publishRaw(
      Array.from({ length: n }, (_, i) => ({ model: MODEL, body: { id: `bad-${i}`, model: `bad-model-${i}`, replyTo: 'test.replies', inputs: 'not tensors' } })),
    );
    await until(() => results.size >= 2 * n, 5000, 'every message answered');
    expect(results.get('ghost-0')).toMatchObject([{ status: 'rejected', model: 'ghost-model-0' }]);
    expect(results.get('bad-0')).toMatchObject([{ status: 'invalid' }]);
    await new Promise((r) => setTimeout(r, 50));
    expect([...modelLabels(await h.metrics.render())]).toEqual([MODEL]);
  });

  it('a source priority no model can have (a BullMQ job priority set by hand) is not a label value', async () => {
    h = await startWorker(snapshotOf('1'));
    const { producer, results } = h;
    await producer.publishRaw(
      Array.from({ length: 20 }, (_, i) => ({ model: MODEL, priority: 1000 + i, body: { ...request(`odd-${i}`, 0), inputs: undefined } })),
    );
    await until(() => results.size >= 20, 5000, 'every message answered');
    await new Promise((r) => setTimeout(r, 50));
    const priorities = new Set([...(await h.metrics.render()).matchAll(/priority="([^"]*)"/g)].map((m) => m[1]));
    expect([...priorities].filter((p) => p !== 'other' && !/^(?:[0-9]|1[0-5]|none)$/.test(p ?? ''))).toEqual([]);
  });
});
