// A request over its topic's max.message.bytes (1 MiB on a default broker) but within
// limits.maxMessageBytes (64 MiB) passed the producer's checks, and the broker refused the produce
// request it went in: `publish --file` failed the other requests of its chunk (`failed:
// TRANSPORT_ERROR`, though some of them had been written and were served) and stopped the run,
// exit 1. The producer now refuses it before sending anything, naming the topic's limit, so a data
// set's bulk publish records that one line invalid and goes on.
import { describe, expect, it } from 'vitest';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { bulkPublish } from '../../../src/producer/bulk-publish.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import type { FileEntry } from '../../../src/producer/request-file.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';
import { mlpRequest } from '../../helpers/mlp-request.ts';
import { orderedCleanups } from '../../helpers/ordered-cleanups.ts';
import { uniqueName } from '../../helpers/services.ts';
import { adminKafka, kafkaSettings } from '../transport/kafka-harness.ts';
import { readCommitted } from '../transport/kafka-topic-reader.ts';

const cleanups = orderedCleanups();

const small = (model: string, id: string): RequestEnvelope => ({ ...mlpRequest(id, 'replies'), model });
/** 5000 samples of 64 float32: 1,280,000 bytes of tensor, over a default topic's 1,048,588. */
const big = (model: string, id: string): RequestEnvelope => ({
  ...small(model, id),
  inputs: [{ name: 'input', dtype: 'float32', shape: [5000, 64], data: new Uint8Array(5000 * 64 * 4) }],
});

/** The ids written to `topic` (a request's key is its id). */
const idsOn = async (topic: string): Promise<string[]> => (await readCommitted(topic)).map((m) => m.key?.toString() ?? '').sort();

function producer(): KafkaProducer {
  const p = new KafkaProducer(kafkaSettings(), { partitions: 2 });
  cleanups.push(() => p.close());
  return p;
}

describe('kafka producer: a request over its topic max.message.bytes', () => {
  it('is refused before anything of its publish is sent, naming the topic limit; the producer goes on', async () => {
    const model = uniqueName('sizemodel');
    const topic = `${model}.requests.p0`;
    const p = producer();
    const error = await p.publish([small(model, 'a'), big(model, 'b'), small(model, 'c')], { encoding: 'json' }).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(FleetError);
    const fe = error as FleetError;
    expect(fe.code).toBe('LIMIT_EXCEEDED');
    expect(fe.details).toMatchObject({ index: 1, topic, maxMessageBytes: 1_048_588 });
    expect(fe.message).toMatch(new RegExp(`request "b" is \\d+ bytes on the wire, over max\\.message\\.bytes \\(1048588\\) of ${topic.replace(/\./g, '\\.')}`));
    expect(await idsOn(topic)).toEqual([]);
    await p.publish(small(model, 'd'), { encoding: 'json' });
    expect(await idsOn(topic)).toEqual(['d']);
  });

  it('goes out when the topic takes it (its max.message.bytes raised)', async () => {
    const model = uniqueName('sizemodel');
    const topic = `${model}.requests.p0`;
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      await createTopicsSettled(admin, [{ topic, numPartitions: 2, configEntries: [{ name: 'max.message.bytes', value: String(4 * 1024 * 1024) }] }]);
    } finally {
      await admin.disconnect();
    }
    await producer().publish(big(model, 'b'), { encoding: 'json' });
    expect(await idsOn(topic)).toEqual(['b']);
  });

  it('publish --file: that line is recorded invalid and the rest of the chunk goes out', async () => {
    const model = uniqueName('sizemodel');
    const topic = `${model}.requests.p0`;
    const entries: FileEntry[] = [
      { line: 1, request: small(model, 'a') },
      { line: 2, request: big(model, 'b') },
      { line: 3, request: small(model, 'c') },
    ];
    const records: Array<{ record: ResultEnvelope; line: number }> = [];
    const stats = await bulkPublish({
      producer: producer(),
      entries: (async function* () {
        yield* entries;
      })(),
      awaitReplies: false,
      timeoutMs: 10_000,
      onRecord: (record, line) => {
        records.push({ record, line });
      },
    });
    expect(stats).toMatchObject({ read: 3, published: 2, invalidEntries: 1 });
    expect(records).toHaveLength(1);
    expect(records[0]?.line).toBe(2);
    expect(records[0]?.record).toMatchObject({ id: 'b', status: 'invalid', error: { code: 'LIMIT_EXCEEDED' } });
    expect(records[0]?.record.error?.message).toMatch(/^line 2: invalid request \(id "b"\): it is \d+ bytes on the wire, over max\.message\.bytes .*; this line was not sent \(the others are\)$/);
    expect(await idsOn(topic)).toEqual(['a', 'c']);
  });
});
