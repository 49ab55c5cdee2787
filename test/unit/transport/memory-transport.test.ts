import { describe, expect, it } from 'vitest';
import { decodeResult } from '../../../src/codec/index.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { Inbox, makeRequest, outcomeFor, startWith } from '../../integration/transport/conformance-kit.ts';

describe('settle retried after a partial failure', () => {
  it('completes the rest instead of refusing the already-published ones; a settle after success is refused', async () => {
    const broker = new MemoryBroker();
    const producer = new MemoryProducer({ broker });
    await producer.publish([makeRequest('m', 'ok1', 0, { replyTo: 'fine' }), makeRequest('m', 'bad1', 0, { replyTo: 'flaky' })]);
    const t = new MemoryTransport({ broker });
    const inbox = new Inbox();
    await startWith(t, 'm', inbox);
    const outcomes = (await inbox.waitFor(2, 1_000)).map(outcomeFor);

    broker.failSends('flaky');
    const first = await t.settle(outcomes).catch((e: unknown) => e);
    expect(FleetError.is(first, 'TRANSPORT_ERROR')).toBe(true);
    broker.failSends('flaky', false);
    await t.settle(outcomes); // what the runtime's publisher does: retry the same batch
    expect(broker.peek('fine').map((m) => decodeResult(m.body).id)).toEqual(['ok1']);
    expect(broker.peek('flaky').map((m) => decodeResult(m.body).id)).toEqual(['bad1']);

    const again = await t.settle(outcomes).catch((e: unknown) => e);
    expect(FleetError.is(again, 'INVALID_ARGUMENT')).toBe(true);
    await t.close();
  });
});
