// The outcome publisher against a real broker when one result can never be published: it must
// not stall the partition (Kafka commits only the contiguous settled prefix) nor its neighbours.
import { afterEach, describe, expect, it } from 'vitest';
import { decodeResult } from '../../../src/codec/index.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { OutcomePublisher } from '../../../src/runtime/outcome-publisher.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import { HEADERS } from '../../../src/transport/names.ts';
import { uniqueName } from '../../helpers/services.ts';
import { Inbox, makeRequest, outcomeFor, startWith } from '../transport/conformance-kit.ts';
import { committed, kafkaSettings, readTopic } from '../transport/kafka-harness.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});


describe.each([
  ['at-least-once', false],
  ['exactly-once', true],
])('outcome publisher on kafka (%s)', (_mode, exactlyOnce) => {
  it('a result over the broker message limit becomes a small failed result plus a DLQ record; the rest settle and the partition commits', async () => {
    const settings = kafkaSettings({ exactlyOnce });
    const model = uniqueName('huge').replace(/-/g, '');
    const replyTo = `${model}.out`;
    const producer = new KafkaProducer(settings, { partitions: 1 });
    open.push(producer);
    await producer.publish(Array.from({ length: 5 }, (_, i) => makeRequest(model, `h${i}`, 0, { replyTo })));
    const transport = new KafkaTransport(settings, { partitions: 1 });
    open.push(transport);
    const inbox = new Inbox();
    await startWith(transport, model, inbox);
    const deliveries = await inbox.waitFor(5, 30_000);

    const publisher = new OutcomePublisher(transport, createLogger({ level: 'silent' }), 1);
    for (const [i, d] of deliveries.entries()) {
      const outcome = outcomeFor(d);
      // 2 MiB of output: over the broker's default message.max.bytes (1 MiB).
      const huge = { name: 'y', dtype: 'float32' as const, shape: [1, 524_288], data: new Uint8Array(2 * 1024 * 1024) };
      publisher.push(i === 2 ? { ...outcome, result: { ...outcome.result, outputs: [huge] } } : outcome);
    }
    await Promise.race([publisher.flush(), new Promise((_, reject) => setTimeout(() => reject(new Error('flush did not finish: the partition is stalled')), 30_000))]);

    expect(await committed(settings.groupId, `${model}.requests.p0`)).toBe(5);
    const replies = (await readTopic(replyTo, 5, 30_000)).map((m) => decodeResult(m.value) as ResultEnvelope);
    const byId = new Map(replies.map((r) => [r.id, r]));
    expect([...byId.keys()].sort()).toEqual(['h0', 'h1', 'h2', 'h3', 'h4']);
    const failed = byId.get('h2');
    expect(failed?.status).toBe('failed');
    expect(failed?.outputs).toBeUndefined();
    expect(failed?.error?.code).toBe('LIMIT_EXCEEDED');
    expect(failed?.error?.message).toMatch(/over the broker's message size limit/);
    for (const id of ['h0', 'h1', 'h3', 'h4']) expect(byId.get(id)?.status).toBe('ok');
    const [dead] = await readTopic(`${model}.dlq`, 1, 30_000);
    expect(dead?.headers[HEADERS.dlqReason]).toBe('LIMIT_EXCEEDED');
  }, 120_000);
});
