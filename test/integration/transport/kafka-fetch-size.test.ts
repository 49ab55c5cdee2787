// Requests larger than the per-partition fetch size (KIP-74): the broker hands over an oversized
// record batch only for the first non-empty partition of a fetch, so without a floor such requests
// arrive one partition at a time, one request per fetch round trip.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import type { TransportLogger } from '../../../src/transport/kafka/kafka-client.ts';
import { KafkaTransport, type KafkaTransportOptions } from '../../../src/transport/kafka/kafka-transport.ts';
import { uniqueName } from '../../helpers/services.ts';
import { Inbox, startWith } from './conformance-kit.ts';
import { adminKafka, kafkaSettings } from './kafka-harness.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';

const track = closeAfterEach();

const PARTITIONS = 8;
const PER_PARTITION = 12;
const FETCH_BYTES = 16 * 1024;
const REQUEST_BYTES = 40 * 1024;

interface Line {
  readonly level: string;
  readonly obj: object;
  readonly msg: string;
}

/** Keeps what the transport logs about its fetch size. */
function captureLog(): { logger: TransportLogger; lines: (level: string) => Line[] } {
  const all: Line[] = [];
  const at = (level: string) => (obj: object, msg: string): void => void all.push({ level, obj, msg });
  return {
    logger: { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') },
    lines: (level) => all.filter((l) => l.level === level && l.msg.includes('transport.kafka.maxBytesPerPartition')),
  };
}

/** A request topic holding PER_PARTITION single-message record batches of `bytes` in each partition. */
async function backlog(model: string, bytes: number): Promise<void> {
  const kafka = adminKafka();
  const admin = kafka.admin();
  await admin.connect();
  await createTopicsSettled(admin, [{ topic: `${model}.requests.p0`, numPartitions: PARTITIONS }]);
  await admin.disconnect();
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  try {
    // One message per partition per send: kafkajs makes one record batch per partition and send.
    for (let i = 0; i < PER_PARTITION; i += 1) {
      const messages = Array.from({ length: PARTITIONS }, (_, p) => ({ partition: p, key: `k${p}-${i}`, value: Buffer.alloc(bytes, i) }));
      await producer.send({ topic: `${model}.requests.p0`, messages, acks: -1 });
    }
  } finally {
    await producer.disconnect();
  }
}

interface Drained {
  /** Deliveries before the last partition's first one: 7 x 12 = 84 when partitions come one at a time. */
  readonly lastPartitionStartsAt: number;
  readonly ms: number;
  readonly transport: KafkaTransport;
}

/** Starts a transport on the backlog and takes every request of it. */
async function drain(model: string, options: KafkaTransportOptions): Promise<Drained> {
  const t = track(new KafkaTransport(kafkaSettings(), { partitions: PARTITIONS, maxWaitTimeMs: 100, ...options }));
  const inbox = new Inbox();
  const started = Date.now();
  await startWith(t, model, inbox);
  const all = await inbox.waitFor(PARTITIONS * PER_PARTITION, 60_000);
  const ms = Date.now() - started;
  const partitions = all.map((d) => d.deliveryId.split('/')[1] ?? '');
  const lastPartitionStartsAt = Math.max(...[...new Set(partitions)].map((p) => partitions.indexOf(p)));
  return { lastPartitionStartsAt, ms, transport: t };
}

describe('kafka fetch size', () => {
  it('requests larger than maxBytesPerPartition arrive from every partition per fetch once their size is known', async () => {
    const model = uniqueName('fetchsize').replace(/-/g, '');
    await backlog(model, REQUEST_BYTES);
    const log = captureLog();
    const got = await drain(model, { maxBytesPerPartition: FETCH_BYTES, largestRequestBytes: REQUEST_BYTES, logger: log.logger });
    console.log(`40 KiB requests, 16 KiB fetch, largest known: last partition starts at delivery ${got.lastPartitionStartsAt}, ${PARTITIONS * PER_PARTITION} in ${got.ms} ms`);
    // The first fetch answers every partition with its first record batch (one request each).
    // Without the floor one partition answers a fetch: the last one starts at 15..44 (measured).
    expect(got.lastPartitionStartsAt).toBeLessThan(PARTITIONS);
    expect(got.transport.fetchBytesPerPartition).toBeGreaterThan(REQUEST_BYTES);
    expect(got.transport.fetchBytesPerPartition).toBeLessThan(2 * REQUEST_BYTES);
    // Said once at start, with the numbers; nothing to warn about later.
    expect(log.lines('info')).toHaveLength(1);
    expect(log.lines('info')[0]?.obj).toMatchObject({ maxBytesPerPartition: FETCH_BYTES, largestRequestBytes: REQUEST_BYTES });
    expect(log.lines('warn')).toEqual([]);
  });

  it('requests under maxBytesPerPartition: every partition per fetch, the fetch size is not raised', async () => {
    const model = uniqueName('fetchsmall').replace(/-/g, '');
    await backlog(model, 4 * 1024);
    const log = captureLog();
    const got = await drain(model, { maxBytesPerPartition: FETCH_BYTES, largestRequestBytes: 4 * 1024, logger: log.logger });
    console.log(`4 KiB requests, 16 KiB fetch: last partition starts at delivery ${got.lastPartitionStartsAt}, ${PARTITIONS * PER_PARTITION} in ${got.ms} ms`);
    // Three 4 KiB batches fit a 16 KiB partition fetch.
    expect(got.lastPartitionStartsAt).toBeLessThan(3 * PARTITIONS);
    expect(got.transport.fetchBytesPerPartition).toBe(FETCH_BYTES);
    expect([...log.lines('info'), ...log.lines('warn')]).toEqual([]);
  });

  it('largest request not known: the first request larger than the fetch size is logged once, naming the setting', async () => {
    const model = uniqueName('fetchunknown').replace(/-/g, '');
    await backlog(model, REQUEST_BYTES);
    const log = captureLog();
    const got = await drain(model, { maxBytesPerPartition: FETCH_BYTES, logger: log.logger });
    console.log(`40 KiB requests, 16 KiB fetch, size unknown: last partition starts at delivery ${got.lastPartitionStartsAt}, ${PARTITIONS * PER_PARTITION} in ${got.ms} ms`);
    expect(got.transport.fetchBytesPerPartition).toBe(FETCH_BYTES);
    expect(log.lines('warn')).toHaveLength(1);
    expect(log.lines('warn')[0]?.obj).toMatchObject({ requestBytes: REQUEST_BYTES, fetchBytesPerPartition: FETCH_BYTES });
  });

  it("a worker's transport fetches the largest request its models allow, whatever maxBytesPerPartition says", async () => {
    const repo = tempDir('fetch-size-repo-');
    const name = uniqueName('img').replace(/-/g, '');
    mkdirSync(join(repo, name));
    // One 3x64x64 float32 sample: 48 KiB raw, 64 KiB as base64, plus 64 KiB of header room.
    writeFileSync(
      join(repo, name, 'config.yaml'),
      `name: ${name}\ninputs:\n  - { name: image, dtype: float32, dims: [-1, 3, 64, 64] }\noutputs:\n  - { name: logits, dtype: float32, dims: [-1, 10] }\nmaxBatchSize: 1\n`,
    );
    const settings = kafkaSettings();
    const cfg = parseFleetConfig({ transport: { kind: 'kafka', kafka: { ...settings, maxBytesPerPartition: FETCH_BYTES } }, modelRepository: repo });
    const t = track(transportFor(cfg, createLogger({ level: 'silent' })));
    expect(t).toBeInstanceOf(KafkaTransport);
    await startWith(t, name, new Inbox());
    expect((t as KafkaTransport).fetchBytesPerPartition).toBe(12 + 64 * 1024 + 4 * Math.ceil((3 * 64 * 64 * 4) / 3) + 8 + 4096);
  });
});

