import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/observability/logger.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { OutcomePublisher } from '../../../src/runtime/outcome-publisher.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import type { Outcome, SettleOptions, Transport } from '../../../src/transport/transport.ts';
import { Inbox, makeRequest, outcomeFor, startWith } from '../../integration/transport/conformance-kit.ts';

const log = createLogger({ level: 'silent' });
const within = <T>(p: Promise<T>, ms: number, what: string): Promise<T> =>
  Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms))]);

async function twoDeliveries() {
  const broker = new MemoryBroker();
  const transport = new MemoryTransport({ broker });
  const inbox = new Inbox();
  await startWith(transport, 'm', inbox);
  const producer = new MemoryProducer({ broker });
  await producer.publish([makeRequest('m', 'a', 0), makeRequest('m', 'b', 0)]);
  const [a, b] = await inbox.waitFor(2, 5000);
  return { transport, producer, a: outcomeFor(a!), b: outcomeFor(b!) };
}

describe('outcome publisher: failures no retry can change', () => {
  it('a batch holding a delivery that is no longer open settles the rest and finishes (no retry until the drain times out)', async () => {
    const { transport, producer, a, b } = await twoDeliveries();
    await transport.settle([a]); // settled elsewhere already (e.g. a duplicate outcome)
    const settled: Outcome[] = [];
    const publisher = new OutcomePublisher(transport, log, 1, 500, (o) => settled.push(...o));
    publisher.push(a);
    publisher.push(b);
    await within(publisher.flush(), 2000, 'flush');
    expect(publisher.pending).toBe(0);
    expect(settled.map((o) => o.result.id)).toEqual(['b']);
    await transport.close();
    await producer.close();
  });

  it('a closed transport: the publisher gives up at once (the broker redelivers), instead of retrying until it is closed itself', async () => {
    const { transport, producer, a, b } = await twoDeliveries();
    await transport.close();
    const publisher = new OutcomePublisher(transport, log, 1);
    publisher.push(a);
    publisher.push(b);
    await within(publisher.flush(), 2000, 'flush');
    expect(publisher.pending).toBe(0);
    await producer.close();
  });
});

/**
 * A memory transport standing in for a broker that must create the destination of every "new"
 * result first, and says so as the Kafka transport does; `create()` ends the creation.
 */
async function creatingTransport(ids: readonly string[], waitsForOthers = false) {
  const broker = new MemoryBroker();
  const transport = new MemoryTransport({ broker });
  const inbox = new Inbox();
  await startWith(transport, 'm', inbox);
  const producer = new MemoryProducer({ broker });
  await producer.publish(ids.map((id) => makeRequest('m', id, 0)));
  const outcomes = (await inbox.waitFor(ids.length, 5000)).map(outcomeFor);
  let create: () => void = () => undefined;
  const created = new Promise<void>((resolve) => (create = resolve));
  const creating: Transport = Object.assign(Object.create(transport) as MemoryTransport, {
    settle: async (batch: readonly Outcome[], options?: SettleOptions): Promise<void> => {
      if (batch.some((o) => o.result.id.startsWith('new'))) {
        options?.onWaitingForCreation?.(waitsForOthers);
        await created;
      }
      await transport.settle(batch);
    },
  });
  return { transport, producer, outcomes, creating, create };
}

async function pushApart(publisher: OutcomePublisher, outcomes: readonly Outcome[]): Promise<void> {
  for (const o of outcomes) {
    publisher.push(o);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('outcome publisher: settles waiting for a creation', () => {
  it('at most 4 per slot give their slot up: past that, one waiting for a creation keeps its slot', async () => {
    const ids = ['new0', 'new1', 'new2', 'new3', 'new4', 'old0'];
    const { transport, producer, outcomes, creating, create } = await creatingTransport(ids);
    const settled: string[] = [];
    const publisher = new OutcomePublisher(creating, log, 1, 500, (o) => settled.push(...o.map((x) => x.result.id)), 1);
    await pushApart(publisher, outcomes);
    await new Promise((r) => setTimeout(r, 100));
    // new0-new3 went aside, new4 holds the one slot: old0 waits for the creation.
    expect(settled).toEqual([]);
    create();
    await within(publisher.flush(), 2000, 'flush');
    expect(settled.sort()).toEqual([...ids].sort());
    await transport.close();
    await producer.close();
  });

  it('past that bound too, one that also waits for other settles gives its slot up (held, it could hang them all)', async () => {
    const ids = ['new0', 'new1', 'new2', 'new3', 'new4', 'old0'];
    const { transport, producer, outcomes, creating, create } = await creatingTransport(ids, true);
    const settled: string[] = [];
    const publisher = new OutcomePublisher(creating, log, 1, 500, (o) => settled.push(...o.map((x) => x.result.id)), 1);
    await pushApart(publisher, outcomes);
    await new Promise((r) => setTimeout(r, 100));
    expect(settled).toEqual(['old0']);
    create();
    await within(publisher.flush(), 2000, 'flush');
    expect(settled.sort()).toEqual([...ids].sort());
    await transport.close();
    await producer.close();
  });

  it('a settle that only waits for a reply destination gives its slot up; flush still waits for it', async () => {
    const ids = ['new0', 'new1', 'old0', 'old1'];
    const { transport, producer, outcomes, creating, create: createNow } = await creatingTransport(ids);
    const settled: string[] = [];
    const publisher = new OutcomePublisher(creating, log, 1, 500, (o) => settled.push(...o.map((x) => x.result.id)), 2);
    await pushApart(publisher, outcomes);
    const flushed = publisher.flush().then(() => 'flushed');
    // Both slots went to the "new" settles: before, the others waited for their creations.
    await within(
      (async () => {
        while (settled.length < 2) await new Promise((r) => setTimeout(r, 5));
      })(),
      2000,
      'the settles of old0 and old1',
    );
    expect(settled).toEqual(['old0', 'old1']);
    expect(await Promise.race([flushed, new Promise((r) => setTimeout(() => r('waiting'), 50))])).toBe('waiting');
    createNow();
    expect(await within(flushed, 2000, 'flush')).toBe('flushed');
    expect(settled.sort()).toEqual([...ids].sort());
    expect(publisher.pending).toBe(0);
    await transport.close();
    await producer.close();
  });
});
