// A BullMQ client hands the results of a reply queue to its caller in the order they were added to
// the queue (docs/frames.md promises a camera's `ok` frame results in order). Its reply workers run
// with concurrency 64; BullMQ fetches a worker's jobs both in its loop and as each job completes,
// and a job a completion fetched reached the processor after one the loop fetched later: results
// added 4 at a time (as a worker's settles publish a batch), 2,000 of them, came out with tens of
// inversions, through subscribeReplies and through request(). Real Redis.
import { Queue } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { resultToJson } from '../../../src/codec/index.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { bullmqSettings } from '../transport/bullmq-harness.ts';
import { makeRequest } from '../transport/conformance-kit.ts';
import { until } from '../../helpers/until.ts';
import { uniqueName } from '../../helpers/services.ts';

const RESULTS = 2_000;
const PER_ADD = 4;

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});

const result = (id: string, model: string): ResultEnvelope => ({
  id,
  model,
  version: '1',
  status: 'ok',
  timings: { queuedMs: 0, batchWaitMs: 0, deviceMs: 1, totalMs: 1 },
  batchSize: PER_ADD,
  gear: PER_ADD,
  device: 0,
  worker: 'w',
  outputs: [{ name: 'y', dtype: 'float32', shape: [1, 1], data: new Uint8Array(4) }],
});

/** Adds the results of `ids` to `queue`, PER_ADD at a time with a short pause, as a worker's settles do. */
async function addInOrder(settings: ReturnType<typeof bullmqSettings>, queue: string, model: string, ids: readonly string[]): Promise<void> {
  const q = new Queue(queue, { connection: { url: settings.redisUrl } as never, prefix: settings.prefix });
  try {
    for (let i = 0; i < ids.length; i += PER_ADD) {
      await q.addBulk(ids.slice(i, i + PER_ADD).map((id) => ({ name: 'result', data: resultToJson(result(id, model)), opts: { jobId: `${id}@1` } })));
      await new Promise((r) => setTimeout(r, 2));
    }
  } finally {
    await q.close();
  }
}

/** Positions of `got` that come after a later-added one (0 when in order). */
function inversions(got: readonly string[], ids: readonly string[]): number {
  const rank = new Map(ids.map((id, i) => [id, i]));
  let newest = -1;
  let count = 0;
  for (const id of got) {
    const r = rank.get(id) ?? -1;
    if (r < newest) count++;
    else newest = r;
  }
  return count;
}

describe('bullmq reply order', () => {
  it('subscribeReplies hands results over in the order they were added to the reply queue', { timeout: 60_000 }, async () => {
    const settings = bullmqSettings();
    const model = uniqueName('order');
    const replyTo = `${model}.scores`;
    const ids = Array.from({ length: RESULTS }, (_, i) => `f${i}`);
    const producer = new BullmqProducer(settings);
    open.push(producer);
    const got: string[] = [];
    await producer.subscribeReplies(replyTo, (r) => got.push(r.id));
    await addInOrder(settings, replyTo, model, ids);
    await until(() => got.length >= RESULTS, 30_000, `${RESULTS} results (got ${got.length})`);
    expect(new Set(got).size).toBe(RESULTS);
    expect(inversions(got, ids)).toBe(0);
  });

  it('request() replies resolve in the order they were added to the inbox', { timeout: 60_000 }, async () => {
    const settings = bullmqSettings();
    const model = uniqueName('order');
    const ids = Array.from({ length: RESULTS }, (_, i) => `q${i}`);
    const producer = new BullmqProducer(settings);
    open.push(producer);
    await producer.prepare();
    const got: string[] = [];
    // No worker serves `model`: the requests wait on its queue; their replies are added below.
    const replies = producer.requestMany(
      ids.map((id) => makeRequest(model, id, 0)),
      { timeoutMs: 50_000 },
    );
    replies.forEach((p) => void p.then((r) => got.push(r.id)).catch(() => undefined));
    await addInOrder(settings, producer.inbox, model, ids);
    await until(() => got.length >= RESULTS, 30_000, `${RESULTS} replies (got ${got.length})`);
    expect(inversions(got, ids)).toBe(0);
  });
});
