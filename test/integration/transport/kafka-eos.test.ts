// Exactly-once (transactional) mode of the Kafka transport.
import { afterEach, describe, expect, it } from 'vitest';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import { uniqueName } from '../../helpers/services.ts';
import { idOf, Inbox, makeRequest, outcomeFor, startWith } from './conformance-kit.ts';
import { kafkaSettings } from './kafka-harness.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});
function track<T extends { close(): Promise<void> }>(c: T): T {
  open.push(c);
  return c;
}

describe('kafka transport, exactly-once', () => {
  it('a partition paused by the in-flight bound resumes once its deliveries are settled', async () => {
    const settings = kafkaSettings({ exactlyOnce: true });
    const model = uniqueName('eosbound').replace(/-/g, '');
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    const t = track(new KafkaTransport(settings, { partitions: 1, lowPriorityInflightPerPartition: 4 }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    await producer.publish(Array.from({ length: 4 }, (_, i) => makeRequest(model, `a${i}`, 1)));
    const first = await inbox.waitFor(4, 30_000);
    // Four unsettled: the partition is at its bound and paused.
    await producer.publish(Array.from({ length: 4 }, (_, i) => makeRequest(model, `b${i}`, 1)));
    expect(await inbox.quietFor(1_500)).toEqual([]);
    await t.settle(first.map(outcomeFor));
    const all = await inbox.waitFor(8, 15_000);
    expect(all.slice(4).map(idOf)).toEqual(['b0', 'b1', 'b2', 'b3']);
  });
});
