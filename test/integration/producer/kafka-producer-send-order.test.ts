// A camera's frames are keyed by streamKey, so they share a partition, and the fleet tells newer
// frames by their order there: publishes made one after another must reach the partition in that
// order, also the first ones, while the producer still checks and creates the request topic.
import { describe, expect, it } from 'vitest';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { mlpRequest } from '../../helpers/mlp-request.ts';
import { orderedCleanups } from '../../helpers/ordered-cleanups.ts';
import { uniqueName } from '../../helpers/services.ts';
import { kafkaSettings } from '../transport/kafka-harness.ts';
import { readCommitted } from '../transport/kafka-topic-reader.ts';

const cleanups = orderedCleanups();

const frame = (model: string, stream: string, i: number): RequestEnvelope => ({ ...mlpRequest(`${stream}-${i}`, 'replies'), model, streamKey: stream, createdAt: 1_000 + i });

describe('kafka producer: publishes made in turn reach a partition in turn', () => {
  it.each([
    { idempotent: true, name: 'idempotent (the default)' },
    { idempotent: false, name: 'not idempotent' },
  ])('$name: 40 publishes of one camera not awaited one by one, the first of them creating the topic', async ({ idempotent }) => {
    const model = uniqueName('ordermodel');
    const producer = new KafkaProducer(kafkaSettings(), { partitions: 4, idempotent });
    cleanups.push(() => producer.close());
    const stream = uniqueName('cam');
    // As a frame loop sends: each frame its own publish, without waiting for the one before.
    await Promise.all(Array.from({ length: 40 }, (_, i) => producer.publish(frame(model, stream, i), { encoding: 'json' })));
    const onTopic = await readCommitted(`${model}.requests.p0`);
    expect(new Set(onTopic.map((m) => m.partition)).size).toBe(1);
    const ids = onTopic.map((m) => (JSON.parse(m.value?.toString() ?? '{}') as { id?: string }).id);
    expect(ids).toEqual(Array.from({ length: 40 }, (_, i) => `${stream}-${i}`));
  });
});
