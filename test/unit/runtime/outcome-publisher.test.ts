import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/observability/logger.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { OutcomePublisher } from '../../../src/runtime/outcome-publisher.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import type { Outcome } from '../../../src/transport/transport.ts';
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
