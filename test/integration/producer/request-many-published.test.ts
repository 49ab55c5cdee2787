// requestMany's onPublished (RequestOptions): called once the broker has the requests (Kafka acked
// the send, Redis added the jobs), never when the broker is not there. publish --file --await counts
// a request published by it; handing requests to requestMany counted them while the broker was away.
// Real Kafka and Redis; no worker (the replies time out: being published is not being answered).
import { afterEach, describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import type { Producer } from '../../../src/producer/producer.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { freePort } from '../../helpers/service-process.ts';
import { uniqueName } from '../../helpers/services.ts';
import { bullmqSettings } from '../transport/bullmq-harness.ts';
import { makeRequest } from '../transport/conformance-kit.ts';
import { kafkaSettings } from '../transport/kafka-harness.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});

/** Three requests through requestMany: what onPublished was called with, and when, against the replies settling. */
async function sendThree(producer: Producer, timeoutMs: number): Promise<{ published: number[]; publishedBeforeReplies: boolean; codes: string[] }> {
  const model = uniqueName('published');
  const published: number[] = [];
  let settled = false;
  let publishedBeforeReplies = false;
  const replies = producer.requestMany(
    ['p1', 'p2', 'p3'].map((id) => makeRequest(model, `${model}-${id}`, 0)),
    {
      timeoutMs,
      onPublished: (count) => {
        published.push(count);
        publishedBeforeReplies = !settled;
      },
    },
  );
  const outcomes = await Promise.allSettled(replies.map((r) => r.finally(() => (settled = true))));
  const codes = outcomes.map((o) => (o.status === 'rejected' && o.reason instanceof FleetError ? o.reason.code : o.status));
  return { published, publishedBeforeReplies, codes };
}

describe('requestMany onPublished', () => {
  it('kafka: called once with the count when the broker acked; never with no broker there', async () => {
    const up = new KafkaProducer(kafkaSettings(), { partitions: 1 });
    open.push(up);
    expect(await sendThree(up, 4_000)).toEqual({ published: [3], publishedBeforeReplies: true, codes: ['TIMEOUT', 'TIMEOUT', 'TIMEOUT'] });

    const away = new KafkaProducer(kafkaSettings({ brokers: [`127.0.0.1:${await freePort()}`] }), { partitions: 1 });
    open.push(away);
    const gone = await sendThree(away, 1_500);
    expect(gone.published).toEqual([]);
    expect(gone.codes.every((c) => c !== 'fulfilled')).toBe(true);
  });

  it('bullmq: called once with the count when Redis added the jobs; never with no Redis there', async () => {
    const up = new BullmqProducer(bullmqSettings());
    open.push(up);
    expect(await sendThree(up, 1_500)).toEqual({ published: [3], publishedBeforeReplies: true, codes: ['TIMEOUT', 'TIMEOUT', 'TIMEOUT'] });

    const away = new BullmqProducer(bullmqSettings({ redisUrl: `redis://127.0.0.1:${await freePort()}`, connectTimeoutMs: 500 }));
    open.push(away);
    const gone = await sendThree(away, 1_500);
    expect(gone.published).toEqual([]);
    expect(gone.codes.every((c) => c !== 'fulfilled')).toBe(true);
  });

  it('memory: called once with the count', async () => {
    const producer = new MemoryProducer({ broker: new MemoryBroker() });
    open.push(producer);
    expect(await sendThree(producer, 300)).toEqual({ published: [3], publishedBeforeReplies: true, codes: ['TIMEOUT', 'TIMEOUT', 'TIMEOUT'] });
  });
});
