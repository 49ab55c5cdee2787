// BullMQ: a request for a model no worker serves. Told the served models, the producer refuses it
// before adding a job (one used to sit in the queue for good); not told, request() times out and
// the TIMEOUT names the model's queue and how to see whether any worker reads it. Real Redis.
import { afterEach, describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { uniqueName } from '../../helpers/services.ts';
import { bullmqSettings, queueJobs } from '../transport/bullmq-harness.ts';
import { makeRequest } from '../transport/conformance-kit.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});

describe('bullmq producer and a model no worker serves', () => {
  it('told the served models: UNKNOWN_MODEL at once, no job added', async () => {
    const settings = bullmqSettings();
    const typo = uniqueName('typo');
    const producer = new BullmqProducer(settings, { models: ['mlp-classifier'] });
    open.push(producer);
    const err = await producer.request(makeRequest(typo, 'u1', 0), { timeoutMs: 30_000 }).catch((e: unknown) => e);
    expect(FleetError.is(err, 'UNKNOWN_MODEL'), `settled with ${String(err)}`).toBe(true);
    expect((err as FleetError).details).toMatchObject({ field: 'model', model: typo, served: ['mlp-classifier'] });
    await expect(producer.publish(makeRequest(typo, 'u2', 0))).rejects.toMatchObject({ code: 'UNKNOWN_MODEL' });
    expect(await queueJobs(settings, `${typo}.requests`, ['wait', 'prioritized'])).toEqual([]);
    // The queue is the one a publish would use: a listed model's request lands there.
    await producer.publish(makeRequest('mlp-classifier', 'k1', 0));
    expect((await queueJobs(settings, 'mlp-classifier.requests', ['wait', 'prioritized'])).map((j) => j.id)).toEqual(['k1']);
  });

  it('not told: the TIMEOUT names the model, its queue and prefix, and how to list its workers', async () => {
    const settings = bullmqSettings();
    const model = uniqueName('nobody');
    const producer = new BullmqProducer(settings);
    open.push(producer);
    const err = await producer.request(makeRequest(model, 't1', 0), { timeoutMs: 500 }).catch((e: unknown) => e);
    expect(FleetError.is(err, 'TIMEOUT'), `settled with ${String(err)}`).toBe(true);
    expect((err as FleetError).message).toBe(
      `no reply for request "t1" within 500 ms: the fleet may be backed up (raise timeoutMs), or no worker may serve model "${model}" ` +
        `(check that the fleet config's models lists it and that a worker reads queue ${model}.requests under prefix ${settings.prefix}: ` +
        `new Queue('${model}.requests', { prefix: '${settings.prefix}' }).getWorkers(), or redis-cli CLIENT LIST (BullMQ names a worker's connections ${settings.prefix}:<base64 of the queue name>))`,
    );
    expect((err as FleetError).details).toMatchObject({ id: 't1', timeoutMs: 500, model });
  });
});
