// The same request id awaited at once from two BullMQ producers (two clients retrying one
// idempotency key). BullMQ keeps one job per id, so one of the two adds is dropped and that
// producer must take the other job's answer (EarlierJobs). Real Redis, a real transport worker.
import { afterEach, describe, expect, it } from 'vitest';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { createTransport } from '../../../src/transport/index.ts';
import type { Transport } from '../../../src/transport/transport.ts';
import { uniqueName } from '../../helpers/services.ts';
import { bullmqSettings } from '../transport/bullmq-harness.ts';
import { makeRequest, outcomeFor } from '../transport/conformance-kit.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});

describe('bullmq: one id awaited at once from two producers', () => {
  it('both get the answer, also when both adds fall in the same millisecond', async () => {
    const model = uniqueName('same-id');
    const settings = bullmqSettings();
    const worker: Transport = createTransport({ kind: 'bullmq', bullmq: settings });
    open.push(worker);
    await worker.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void worker.settle(ds.map(outcomeFor)) });
    const a = new BullmqProducer(settings, { clientId: 'a' });
    const b = new BullmqProducer(settings, { clientId: 'b' });
    open.push(a, b);
    // Inboxes open first, so both adds of each pair below go out in the same tick.
    await Promise.all([a.request(makeRequest(model, 'warm-a', 0), { timeoutMs: 30_000 }), b.request(makeRequest(model, 'warm-b', 0), { timeoutMs: 30_000 })]);

    const outcomes = await Promise.all(
      Array.from({ length: 10 }, async (_, i) => {
        const id = `both-${i}`;
        const settled = await Promise.allSettled([a.request(makeRequest(model, id, 0), { timeoutMs: 5_000 }), b.request(makeRequest(model, id, 0), { timeoutMs: 5_000 })]);
        return settled.map((s) => (s.status === 'fulfilled' ? s.value.id : `${(s.reason as Error).message}`));
      }),
    );
    const failed = outcomes.flat().filter((o) => !o.startsWith('both-'));
    expect(failed, `${failed.length} of 20 awaits got no answer`).toEqual([]);
    expect(outcomes).toEqual(Array.from({ length: 10 }, (_, i) => [`both-${i}`, `both-${i}`]));
  }, 60_000);
});
