// BullMQ keeps one job per id (jobId = id): a request-and-await whose id was asked before (a retry
// after a timeout, a resumed bulk run) used to wait for a reply that never came, because BullMQ
// dropped the second add and the earlier job answered the earlier replyTo. The producer now takes
// the earlier job's answer: at once when it is done, as soon as it completes when it is still
// queued, an error naming the way out when it failed for good. Real Redis, a real worker.
import { Queue, Worker } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { BullmqSettings } from '../../../src/contracts/fleet-config.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { runWorker } from '../../../src/runtime/worker-process.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { fleetErrorOf } from '../../helpers/fleet-error-of.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';
const MODEL = 'mlp-classifier';
const log = createLogger({ level: 'warn' });
const cleanup: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

const request = (id: string): RequestEnvelope => ({
  id,
  model: MODEL,
  priority: 0,
  createdAt: Date.now(),
  inputs: [{ name: 'input', dtype: 'float32', shape: [1, 64], data: new Uint8Array(Float32Array.from({ length: 64 }, (_, i) => (i % 7) / 7).buffer) }],
});

/**
 * The worker counts a request once its answer is settled (published, then the job completed), so
 * the reply can reach the producer before the count moves: waits up to 10 s for `expected`, then
 * holds it for `holdMs` more (a second run of the request would count after its reply too).
 * Returns the count seen last.
 */
async function okCountSettles(okCount: () => Promise<number>, expected: number, holdMs = 500): Promise<number> {
  let seen = await okCount();
  for (const until = Date.now() + 10_000; seen < expected && Date.now() < until; seen = await okCount()) await new Promise((r) => setTimeout(r, 25));
  for (const until = Date.now() + holdMs; seen === expected && Date.now() < until; seen = await okCount()) await new Promise((r) => setTimeout(r, 25));
  return seen;
}

function setup(): { bullmq: BullmqSettings; producer: () => BullmqProducer; startWorker: () => Promise<void>; okCount: () => Promise<number> } {
  const config = parseFleetConfig({
    transport: { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('earlier') } },
    devices: { count: 1, backend: 'sim' },
    modelRepository: 'examples/models',
    models: [MODEL],
    worker: { metricsPort: 0 },
    log: { level: 'warn' },
  });
  if (config.transport.kind !== 'bullmq') throw new Error('bullmq config expected');
  const bullmq = config.transport.bullmq;
  let worker: Awaited<ReturnType<typeof runWorker>> | undefined;
  return {
    bullmq,
    producer: () => {
      const p = new BullmqProducer(bullmq);
      cleanup.push(() => p.close());
      return p;
    },
    startWorker: async () => {
      worker = await runWorker(config, 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
      cleanup.push(() => worker?.stop());
    },
    // Device work done: ok results the worker produced.
    okCount: async () => {
      const text = (await worker?.metrics.render()) ?? '';
      const line = text.split('\n').find((l) => l.startsWith('npu_fleet_requests_total{') && l.includes(`model="${MODEL}"`) && l.includes('status="ok"'));
      return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
    },
  };
}

const outputBytes = (r: ResultEnvelope): Uint8Array => r.outputs?.[0]?.data ?? new Uint8Array(0);

describe('BullMQ request-and-await of an id asked before', () => {
  it('gets the earlier answer at once when that job is done, without running it again', async () => {
    const s = setup();
    await s.startWorker();
    const first = await s.producer().request(request('twice'), { timeoutMs: 30_000 });
    expect(first.status).toBe('ok');
    // Another client (a new inbox), the same id: before, a TIMEOUT after 30 s.
    const startedAt = Date.now();
    const again = await s.producer().request(request('twice'), { timeoutMs: 30_000 });
    expect(Date.now() - startedAt).toBeLessThan(5_000);
    expect(again).toEqual(first);
    // And through requestMany, mixed with a new id.
    const [old, fresh] = s.producer().requestMany([request('twice'), request('new')], { timeoutMs: 30_000 });
    expect(await old).toEqual(first);
    expect((await fresh)?.status).toBe('ok');
    expect(await okCountSettles(s.okCount, 2)).toBe(2);
  });

  it('a retry after a timeout gets the answer of the first attempt once a worker serves it', async () => {
    const s = setup();
    const err = await s.producer().request(request('retried'), { timeoutMs: 300 }).catch((e: unknown) => e);
    expect(fleetErrorOf(() => { throw err; }).code).toBe('TIMEOUT');
    // The first job still waits in the queue; the retry's add is dropped by BullMQ. It is answered
    // when that job is: the worker starts now.
    const retry = s.producer().request(request('retried'), { timeoutMs: 30_000 });
    await s.startWorker();
    const result = await retry;
    expect(result).toMatchObject({ id: 'retried', status: 'ok' });
    expect(await okCountSettles(s.okCount, 1)).toBe(1);
  });

  it('an earlier job that failed for good is named, with the way out, instead of a silent timeout', async () => {
    const s = setup();
    const queueName = s.bullmq.queueTemplate.replace('{model}', MODEL);
    const queue = new Queue(queueName, { connection: { url: getServices().redisUrl }, prefix: s.bullmq.prefix });
    cleanup.push(() => queue.close());
    // A job of that id that its worker failed (attempts 1): kept for a day by KEEP_FAILED.
    await queue.add('request', { id: 'doomed' }, { jobId: 'doomed', removeOnFail: { age: 86_400 } });
    const failing = new Worker(queueName, async () => { throw new Error('stalled out (test)'); }, { connection: { url: getServices().redisUrl }, prefix: s.bullmq.prefix });
    cleanup.push(() => failing.close());
    for (const end = Date.now() + 10_000; (await queue.getJobState('doomed')) !== 'failed' && Date.now() < end; ) await new Promise((r) => setTimeout(r, 50));
    await failing.close();
    const startedAt = Date.now();
    const err = await s.producer().request(request('doomed'), { timeoutMs: 30_000 }).catch((e: unknown) => e);
    expect(Date.now() - startedAt).toBeLessThan(5_000);
    const e = fleetErrorOf(() => { throw err; });
    expect(e.code).toBe('INVALID_ARGUMENT');
    expect(e.message).toMatch(/request id "doomed" belongs to an earlier job that failed for good \(stalled out \(test\)\).*npu-fleet dlq replay.*new id/);
  });

  it('with rerunNotOk (publish --file), an earlier answer other than ok runs again; an ok one still stands', async () => {
    const s = setup();
    await s.startWorker();
    const due = (ms: number): RequestEnvelope => ({ ...request('retry-me'), deadlineAt: Date.now() + ms });
    // Due before the worker can see it: answered expired, no device time.
    const first = await s.producer().request(due(1), { timeoutMs: 30_000 });
    expect(first.status).toBe('expired');
    // Without the option the earlier answer stands (the behaviour above).
    expect((await s.producer().request(due(60_000), { timeoutMs: 30_000 })).status).toBe('expired');
    const okBefore = await okCountSettles(s.okCount, 0);
    const [again, fresh] = s.producer().requestMany([due(60_000), request('first-time')], { timeoutMs: 30_000, rerunNotOk: true });
    expect((await again!).status).toBe('ok');
    expect((await fresh!).status).toBe('ok');
    expect(await okCountSettles(s.okCount, okBefore + 2)).toBe(okBefore + 2);
    // An ok answer is taken again, not re-run.
    const okAgain = await s.producer().request(due(60_000), { timeoutMs: 30_000, rerunNotOk: true });
    expect(okAgain.status).toBe('ok');
    expect(await okCountSettles(s.okCount, okBefore + 2)).toBe(okBefore + 2);
  });

  it('with rerunAnswered (publish --file, not resumed), an earlier ok answer runs again too', async () => {
    const s = setup();
    await s.startWorker();
    const first = await s.producer().request(request('rerun-ok'), { timeoutMs: 30_000 });
    expect(first.status).toBe('ok');
    expect(await okCountSettles(s.okCount, 1)).toBe(1);
    const [again] = s.producer().requestMany([request('rerun-ok')], { timeoutMs: 30_000, rerunAnswered: true });
    const result = await again!;
    expect(result.status).toBe('ok');
    // Its own run, not the earlier job's answer.
    expect(result.completedAt).toBeGreaterThan(first.completedAt ?? Infinity);
    expect(await okCountSettles(s.okCount, 2)).toBe(2);
  });

  it('an earlier job of the id with other inputs does not answer: ID_IN_USE while it is queued, a run of its own once it is answered', async () => {
    const s = setup();
    const other = (id: string): RequestEnvelope => {
      const r = request(id);
      return { ...r, inputs: [{ name: 'input', dtype: 'float32', shape: [1, 64], data: new Uint8Array(Float32Array.from({ length: 64 }, (_, i) => 1 - (i % 5) / 5).buffer) }] };
    };
    // Data set A's request, still queued (no worker yet).
    const a = await s.producer().request(request('reused'), { timeoutMs: 300 }).catch((e: unknown) => e);
    expect(fleetErrorOf(() => { throw a; }).code).toBe('TIMEOUT');
    // Data set B reuses the id with other inputs: before, it took A's outputs as its own once A ran.
    const startedAt = Date.now();
    const b = await s.producer().request(other('reused'), { timeoutMs: 30_000 }).catch((e: unknown) => e);
    expect(Date.now() - startedAt).toBeLessThan(5_000);
    const e = fleetErrorOf(() => { throw b; });
    expect(e.code).toBe('ID_IN_USE');
    expect(e.retriable).toBe(true);
    expect(e.message).toMatch(/request id "reused" belongs to an earlier job with other inputs, queued or running .*new id, or again once that job is answered/);
    // A's own retry (the same inputs) still takes A's answer, once a worker serves it.
    const retryA = s.producer().request(request('reused'), { timeoutMs: 30_000 });
    await s.startWorker();
    const answerA = await retryA;
    expect(answerA.status).toBe('ok');
    expect(await okCountSettles(s.okCount, 1)).toBe(1);
    // B again, A answered: A's job is replaced and B runs on its own inputs, no rerun option needed
    // (a --resume takes earlier answers, but not those of other inputs).
    const answerB = await s.producer().request(other('reused'), { timeoutMs: 30_000 });
    expect(answerB.status).toBe('ok');
    expect(Buffer.from(outputBytes(answerB)).equals(Buffer.from(outputBytes(answerA)))).toBe(false);
    expect(await okCountSettles(s.okCount, 2)).toBe(2);
    // A asked once more meets B's answered job (other inputs again): it runs anew, A's outputs again.
    const answerA2 = await s.producer().request(request('reused'), { timeoutMs: 30_000 });
    expect(Buffer.from(outputBytes(answerA2)).equals(Buffer.from(outputBytes(answerA)))).toBe(true);
    expect(await okCountSettles(s.okCount, 3)).toBe(3);
  });
});
