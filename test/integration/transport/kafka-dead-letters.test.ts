import { CompressionTypes, ConfigResourceTypes, Kafka, type IHeaders, type Producer } from 'kafkajs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { KafkaDeadLetters } from '../../../src/transport/kafka/kafka-dead-letters.ts';
import { replayTransactionalId } from '../../../src/transport/kafka/replay-producer.ts';
import { HEADERS } from '../../../src/transport/names.ts';
import { uniqueName } from '../../helpers/services.ts';
import { adminKafka, kafkaSettings } from './kafka-harness.ts';
import { readCommitted, transactionsSettled } from './kafka-topic-reader.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  vi.restoreAllMocks();
  await Promise.allSettled(open.splice(0).map((x) => x.close()));
});

/** Fresh names, a DLQ topic and the model's request topics (one partition each unless told). */
async function setup(partitions = 1, stallMs?: number): Promise<{ model: string; tag: string; dlq: string; source: (p: number) => string; dl: KafkaDeadLetters }> {
  const tag = uniqueName('kdl').replace(/[^A-Za-z0-9-]/g, '');
  const model = 'm';
  const settings = kafkaSettings({ topicTemplate: `${tag}.{model}.requests.p{priority}`, repliesTemplate: `${tag}.{model}.replies`, dlqTemplate: `${tag}.{model}.dlq` });
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    await createTopicsSettled(admin, [`${tag}.m.dlq`, `${tag}.m.requests.p0`, `${tag}.m.requests.p1`].map((topic) => ({ topic, numPartitions: partitions })));
  } finally {
    await admin.disconnect();
  }
  const dl = new KafkaDeadLetters(settings, undefined, stallMs);
  open.push(dl);
  return { model, tag, dlq: `${tag}.m.dlq`, source: (p) => `${tag}.m.requests.p${p}`, dl };
}

/** The committed messages of `topic` once no replay transaction of `dlq` is in progress (see transactionsSettled). */
async function resent(dlq: string, topic: string): ReturnType<typeof readCommitted> {
  await transactionsSettled(replayTransactionalId(dlq));
  return readCommitted(topic);
}

/** A DLQ record as the transport writes it: the original key, value and headers plus the DLQ's. */
const record = (source: string, n: number, extra: IHeaders = {}): { key: string; value: Buffer; headers: IHeaders; partition?: number } => ({
  key: `k${n}`,
  value: Buffer.from(`garbage-${n}`),
  headers: { ...extra, [HEADERS.dlqReason]: 'UNKNOWN_MODEL', [HEADERS.dlqMessage]: 'not served', [HEADERS.dlqSource]: `${source}/0/${n}` },
});

async function writeDlq(topic: string, messages: ReturnType<typeof record>[]): Promise<void> {
  const producer = adminKafka().producer();
  await producer.connect();
  try {
    await producer.send({ topic, messages, acks: -1 });
  } finally {
    await producer.disconnect();
  }
}

describe('KafkaDeadLetters', () => {
  it('replay --limit N re-sends N records, also when they arrive in one fetch batch', async () => {
    const { model, dlq, source, dl } = await setup();
    await writeDlq(dlq, [1, 2, 3, 4, 5].map((n) => record(source(1), n)));
    const report = await dl.replay({ model, limit: 2 });
    expect(report.replayed).toBe(2);
    const sent = await resent(dlq, source(1));
    expect(sent.map((m) => m.value?.toString())).toEqual(['garbage-1', 'garbage-2']);
  }, 90_000);
});

describe('KafkaDeadLetters: what replay and list promise', () => {
  it('replay re-sends key, value and headers byte for byte (binary values, repeated keys, no key)', async () => {
    const { model, dlq, source, dl } = await setup();
    const bin = Buffer.from([0xff, 0x00, 0xfe]);
    await writeDlq(dlq, [
      { ...record(source(1), 1, { bin, dup: ['x', 'y'], 'content-type': 'application/vnd.npu-fleet.request+frame' }), key: Buffer.from([0xc3, 0x28]) as unknown as string },
      { ...record(source(0), 2), key: null as unknown as string },
    ]);
    expect(await dl.replay({ model })).toMatchObject({ replayed: 2, skipped: [] });
    const [one] = await resent(dlq, source(1));
    expect(one?.key).toEqual(Buffer.from([0xc3, 0x28]));
    expect(one?.headers['bin']).toEqual(bin);
    expect((one?.headers['dup'] as Buffer[]).map(String)).toEqual(['x', 'y']);
    expect(String(one?.headers['content-type'])).toBe('application/vnd.npu-fleet.request+frame');
    expect(Object.keys(one?.headers ?? {}).filter((k) => k.startsWith('npu-fleet-dlq-'))).toEqual([]);
    const [two] = await resent(dlq, source(0));
    expect(two?.key).toBeNull();
    expect(two?.value?.toString()).toBe('garbage-2');
  }, 90_000);

  it('a DLQ written in transactions (committed, then aborted at the end) lists and replays without stalling; no group is left', async () => {
    const { model, dlq, source, dl } = await setup(2);
    const kafka = adminKafka();
    const producer = kafka.producer({ transactionalId: uniqueName('kdl-tx'), idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    try {
      for (const [n, commit] of [[1, true], [2, true], [3, false]] as const) {
        const tx = await producer.transaction();
        await tx.send({ topic: dlq, messages: [{ ...record(source(1), n), partition: 0 }, { ...record(source(1), n + 10), partition: 1 }] });
        if (commit) await tx.commit();
        else await tx.abort();
      }
    } finally {
      await producer.disconnect();
    }
    const admin = kafka.admin();
    await admin.connect();
    const groupsBefore = (await admin.listGroups()).groups.filter((g) => g.groupId.startsWith('npu-fleet-dlq-')).length;
    const started = Date.now();
    const listing = await dl.list({ model });
    expect(listing.scanned).toBe(4);
    expect(await dl.replay({ model })).toMatchObject({ scanned: 4, replayed: 4 });
    expect(Date.now() - started).toBeLessThan(20_000);
    expect((await admin.listGroups()).groups.filter((g) => g.groupId.startsWith('npu-fleet-dlq-')).length).toBe(groupsBefore);
    await admin.disconnect();
  }, 90_000);

  it('a DLQ topic with a transaction still open at its end lists what is committed without stalling', async () => {
    const { model, dlq, source, dl } = await setup();
    await writeDlq(dlq, [record(source(1), 1)]);
    const producer = adminKafka().producer({ transactionalId: uniqueName('kdl-open'), idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    const tx = await producer.transaction();
    try {
      await tx.send({ topic: dlq, messages: [record(source(1), 2)] });
      const started = Date.now();
      expect((await dl.list({ model })).scanned).toBe(1);
      expect(Date.now() - started).toBeLessThan(20_000);
    } finally {
      await tx.abort();
      await producer.disconnect();
    }
  }, 90_000);

  it('a record whose source topic does not exist is skipped and listed; the others are re-sent', async () => {
    const { model, tag, dlq, source, dl } = await setup();
    await writeDlq(dlq, [record(source(1), 1), record(`${tag}.m.requests.p5`, 2), record(source(1), 3)]);
    const report = await dl.replay({ model });
    expect(report).toMatchObject({ matched: 3, replayed: 2, skipped: [{ ref: `${dlq}/0/1`, why: expect.stringMatching(/p5/) }] });
    expect((await resent(dlq, source(1))).map((m) => m.value?.toString())).toEqual(['garbage-1', 'garbage-3']);
  }, 120_000);

  it('two DLQ records of one request message (a worker died between the DLQ write and the commit, and answered it again) are re-sent once, also by a later replay', async () => {
    const { model, dlq, source, dl } = await setup();
    // The third is the first again: the same original (npu-fleet-dlq-source), dead-lettered twice.
    await writeDlq(dlq, [record(source(1), 1), record(source(1), 2), record(source(1), 1)]);
    const report = await dl.replay({ model });
    expect(report).toMatchObject({ matched: 3, replayed: 2, alreadyReplayed: 1, skipped: [] });
    expect((await resent(dlq, source(1))).map((m) => m.value?.toString())).toEqual(['garbage-1', 'garbage-2']);
    expect(await dl.replay({ model })).toMatchObject({ matched: 3, replayed: 0, alreadyReplayed: 3 });
  }, 120_000);

  it('a replay whose records add up to more than one produce request takes (the broker\'s 1 MiB message.max.bytes) re-sends each once', async () => {
    const { model, dlq, source, dl } = await setup();
    // Compressed in the DLQ, these 8 x 300 kB arrive in one fetch batch; re-sent as they are, one
    // record batch of 2.4 MB would be refused by the broker as a whole.
    const big = (n: number): ReturnType<typeof record> => ({ ...record(source(1), n), value: Buffer.concat([Buffer.from(`big-${n}:`), Buffer.alloc(300_000, n)]) });
    const producer = adminKafka().producer();
    await producer.connect();
    try {
      await producer.send({ topic: dlq, messages: [1, 2, 3, 4, 5, 6, 7, 8].map(big), compression: CompressionTypes.GZIP, acks: -1 });
    } finally {
      await producer.disconnect();
    }
    const progress: number[] = [];
    expect(await dl.replay({ model, progressEvery: 1, onProgress: (p) => progress.push(p.replayed) })).toMatchObject({ scanned: 8, replayed: 8, skipped: [] });
    const sent = await resent(dlq, source(1));
    expect(sent.map((m) => m.value?.subarray(0, 6).toString())).toEqual([1, 2, 3, 4, 5, 6, 7, 8].map((n) => `big-${n}:`));
    expect(sent.every((m, i) => m.value?.length === 300_000 + `big-${i + 1}:`.length)).toBe(true);
    // Progress is reported as the chunks go out, not only once the whole fetch batch is sent.
    expect(progress.length).toBeGreaterThan(2);
  }, 120_000);

  it('a request topic with a smaller max.message.bytes gets sends that fit it; a record over it is skipped naming the setting, the rest re-sent', async () => {
    const { model, dlq, source, dl } = await setup();
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      await admin.alterConfigs({ validateOnly: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: source(1), configEntries: [{ name: 'max.message.bytes', value: '20000' }] }] });
    } finally {
      await admin.disconnect();
    }
    const sized = (n: number, bytes: number): ReturnType<typeof record> => ({ ...record(source(1), n), value: Buffer.concat([Buffer.from(`r${n}:`), Buffer.alloc(bytes, n)]) });
    await writeDlq(dlq, [sized(1, 100), sized(2, 30_000), sized(3, 8_000), sized(4, 8_000), sized(5, 8_000), sized(6, 8_000)]);
    const report = await dl.replay({ model });
    expect(report).toMatchObject({ matched: 6, replayed: 5, skipped: [{ ref: `${dlq}/0/1`, why: expect.stringMatching(/max\.message\.bytes \(20000\) of \S+p1/) }] });
    expect((await resent(dlq, source(1))).map((m) => m.value?.subarray(0, 3).toString())).toEqual(['r1:', 'r3:', 'r4:', 'r5:', 'r6:']);
  }, 90_000);

  it('a broker slow to acknowledge the re-sends is not taken for a stalled read: the replay finishes', async () => {
    const { model, dlq, source, dl } = await setup(1, 1_500);
    await writeDlq(dlq, [1, 2, 3].map((n) => record(source(1), n)));
    // Each acknowledgement takes longer than the stall limit (acks=all on a busy cluster).
    const producer = Kafka.prototype.producer;
    let delayed = 0;
    vi.spyOn(Kafka.prototype, 'producer').mockImplementation(function (this: Kafka, ...args: Parameters<Kafka['producer']>): Producer {
      const p = producer.apply(this, args);
      // Replays send in transactions: each transaction's send is the slow one.
      const transaction = p.transaction.bind(p);
      p.transaction = async () => {
        const txn = await transaction();
        const send = txn.sendBatch.bind(txn);
        txn.sendBatch = async (batch) => {
          delayed++;
          await new Promise((r) => setTimeout(r, 2_500));
          return send(batch);
        };
        return txn;
      };
      return p;
    });
    expect(await dl.replay({ model })).toMatchObject({ replayed: 3, skipped: [] });
    expect(delayed).toBeGreaterThan(0);
    expect((await resent(dlq, source(1))).map((m) => m.value?.toString())).toEqual(['garbage-1', 'garbage-2', 'garbage-3']);
  }, 90_000);

  // A request the DLQ topic refused as too big is dead-lettered without its bytes (kafka-outcomes.ts):
  // re-sending that record's empty value would only be answered `invalid`, dead-lettered again with
  // the empty message as its source, and marked replayed, so the original was never re-driven.
  it('a record dead-lettered without its bytes (too big for the DLQ topic) is skipped naming where the original is, not re-sent empty', async () => {
    const { model, dlq, source, dl } = await setup();
    const dropped = {
      ...record(source(1), 1, {
        [HEADERS.requestId]: 'big-1',
        [HEADERS.dlqValueDropped]: `2097152 bytes not kept: over the message size limit of ${dlq}; the original stays at ${source(1)}/0/1 until that topic's retention`,
      }),
      value: Buffer.alloc(0),
    };
    await writeDlq(dlq, [dropped, record(source(1), 2)]);
    const skipped = [{ ref: `${dlq}/0/0`, why: expect.stringMatching(new RegExp(`2097152 bytes not kept.*${source(1)}/0/1`)) }];
    expect(await dl.replay({ model, dryRun: true })).toMatchObject({ matched: 2, replayed: 1, skipped });
    expect(await dl.replay({ model })).toMatchObject({ matched: 2, replayed: 1, skipped });
    expect((await resent(dlq, source(1))).map((m) => m.value?.toString())).toEqual(['garbage-2']);
  }, 90_000);

  it('list and replay of a model whose DLQ topic does not exist answer at once with nothing', async () => {
    const { dl } = await setup();
    expect(await dl.list({ model: 'nosuch' })).toMatchObject({ scanned: 0, matched: 0 });
    expect(await dl.replay({ model: 'nosuch' })).toMatchObject({ scanned: 0, replayed: 0 });
  }, 60_000);

  it('list right after the DLQ topic was created (its leader not yet serving it) waits for the leader instead of failing', async () => {
    const { tag, dl } = await setup();
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      // kafkajs's ListOffsets gives up on the first NOT_LEADER_FOR_PARTITION; here about 5 in 6
      // fresh topics answered that to an immediate read, so five in a row all but always meet it.
      for (let i = 0; i < 5; i++) {
        const model = `fresh${i}`;
        await admin.createTopics({ topics: [{ topic: `${tag}.${model}.dlq`, numPartitions: 3 }], waitForLeaders: false });
        expect(await dl.list({ model })).toMatchObject({ scanned: 0, matched: 0 });
      }
    } finally {
      await admin.disconnect();
    }
  }, 60_000);
});
