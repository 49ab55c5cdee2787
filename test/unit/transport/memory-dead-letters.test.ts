import { describe, expect, it, vi } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { HEADERS } from '../../../src/transport/names.ts';
import { MemoryBroker, type MemorySend } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryDeadLetters } from '../../../src/transport/memory/memory-dead-letters.ts';

const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);

/** A DLQ record as MemoryTransport writes it. */
const record = (n: number): MemorySend => ({
  body: bytes(`garbage-${n}`),
  key: `k${n}`,
  headers: { [HEADERS.dlqReason]: 'UNKNOWN_MODEL', [HEADERS.dlqMessage]: 'not served', [HEADERS.dlqSource]: `m.requests#${n}`, [HEADERS.dlqPriority]: '1' },
});

describe('MemoryDeadLetters', () => {
  it('a replay that fails part way takes the records it re-sent out of the DLQ, so the next run does not send them twice', async () => {
    const broker = new MemoryBroker();
    broker.send('m.dlq', [record(1), record(2), record(3)]);
    const dl = new MemoryDeadLetters(broker);
    const send = broker.send.bind(broker);
    let sends = 0;
    // The source queue refuses the second re-send.
    vi.spyOn(broker, 'send').mockImplementation((queue, messages) => {
      if (queue === 'm.requests' && ++sends === 2) throw new FleetError('TRANSPORT_ERROR', 'refused');
      send(queue, messages);
    });
    const failed = await dl.replay({ model: 'm' }).catch((e: unknown) => e);
    expect(FleetError.is(failed, 'TRANSPORT_ERROR')).toBe(true);
    expect((failed as Error).message).toMatch(/1 record\(s\) were re-sent before it/);
    expect(broker.peek('m.requests').map((m) => new TextDecoder().decode(m.body))).toEqual(['garbage-1']);
    expect((await dl.list({ model: 'm' })).letters.map((l) => new TextDecoder().decode(broker.peek('m.dlq').find((m) => m.id === l.ref)?.body))).toEqual(['garbage-2', 'garbage-3']);

    vi.restoreAllMocks();
    expect(await dl.replay({ model: 'm' })).toMatchObject({ matched: 2, replayed: 2 });
    expect(broker.peek('m.requests').map((m) => new TextDecoder().decode(m.body))).toEqual(['garbage-1', 'garbage-2', 'garbage-3']);
  });

  it('a replay whose signal is aborted stops between records, reports stopped and exactly what it re-sent; the next run sends the rest', async () => {
    const broker = new MemoryBroker();
    broker.send('m.dlq', [record(1), record(2), record(3)]);
    const dl = new MemoryDeadLetters(broker);
    const stop = new AbortController();
    const send = broker.send.bind(broker);
    vi.spyOn(broker, 'send').mockImplementation((queue, messages) => {
      send(queue, messages);
      if (queue === 'm.requests') stop.abort();
    });
    expect(await dl.replay({ model: 'm', signal: stop.signal })).toMatchObject({ replayed: 1, stopped: true });
    vi.restoreAllMocks();
    const rest = await dl.replay({ model: 'm' });
    expect(rest).toMatchObject({ replayed: 2 });
    expect(rest).not.toHaveProperty('stopped');
    expect(broker.peek('m.requests').map((m) => new TextDecoder().decode(m.body))).toEqual(['garbage-1', 'garbage-2', 'garbage-3']);
  });
});
