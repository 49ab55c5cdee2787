// Kafka DLQ replay re-sends an original request message once even when the DLQ holds two records
// of it (a worker died between writing the DLQ record and committing the offset) and no single
// replay reads both: a --since window that starts between them, a --reason that matches one, or
// a replay that ran before the second record was written. The markers say which original each
// re-send stood for (replay-ledger.ts).
import type { IHeaders } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import { KafkaDeadLetters } from '../../../src/transport/kafka/kafka-dead-letters.ts';
import { replayTransactionalId } from '../../../src/transport/kafka/replay-producer.ts';
import { HEADERS } from '../../../src/transport/names.ts';
import { uniqueName } from '../../helpers/services.ts';
import { adminKafka, kafkaSettings } from './kafka-harness.ts';
import { readCommitted, transactionsSettled } from './kafka-topic-reader.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((x) => x.close()));
});

async function setup(): Promise<{ model: string; dlq: string; source: string; dl: () => KafkaDeadLetters }> {
  const tag = uniqueName('kro2').replace(/[^A-Za-z0-9-]/g, '');
  const settings = kafkaSettings({ topicTemplate: `${tag}.{model}.requests.p{priority}`, repliesTemplate: `${tag}.{model}.replies`, dlqTemplate: `${tag}.{model}.dlq` });
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    await createTopicsSettled(admin, [`${tag}.m.dlq`, `${tag}.m.requests.p1`].map((topic) => ({ topic, numPartitions: 1 })));
  } finally {
    await admin.disconnect();
  }
  return {
    model: 'm',
    dlq: `${tag}.m.dlq`,
    source: `${tag}.m.requests.p1`,
    // A reader per replay, as each CLI run has its own.
    dl: () => {
      const dl = new KafkaDeadLetters(settings);
      open.push(dl);
      return dl;
    },
  };
}

/** A DLQ record of the original at `${source}/0/${n}`, dead-lettered at `atMs` for `reason`. */
function record(source: string, n: number, atMs: number, reason = 'UNKNOWN_MODEL'): { key: string; value: Buffer; headers: IHeaders; timestamp: string } {
  return {
    key: `k${n}`,
    value: Buffer.from(`garbage-${n}`),
    headers: { [HEADERS.dlqReason]: reason, [HEADERS.dlqMessage]: 'not served', [HEADERS.dlqSource]: `${source}/0/${n}` },
    timestamp: String(atMs),
  };
}

async function writeDlq(topic: string, messages: ReturnType<typeof record>[]): Promise<void> {
  const producer = adminKafka().producer();
  await producer.connect();
  try {
    await producer.send({ topic, messages, acks: -1 });
  } finally {
    await producer.disconnect();
  }
}

async function resent(dlq: string, topic: string): Promise<string[]> {
  await transactionsSettled(replayTransactionalId(dlq));
  return (await readCommitted(topic)).map((m) => String(m.value));
}

describe('KafkaDeadLetters: one re-send per original across replays', () => {
  // A replay stopped (its signal aborted, Ctrl-C) between the transactions of one fetch batch: a
  // second record whose original was left unsent must not be marked as standing for a re-send, or
  // the next replay passes over both records and the request is never re-sent.
  it('a replay stopped part way through a batch does not mark the second record of an original it left unsent', async () => {
    const { model, dlq, source, dl } = await setup();
    const now = Date.now();
    // 1200 records in one fetch batch: re-sent in transactions of 500; original 700's second record last.
    await writeDlq(dlq, [...Array.from({ length: 1200 }, (_, n) => record(source, n, now - 60_000)), record(source, 700, now - 50_000)]);
    const stop = new AbortController();
    const first = await dl().replay({ model, signal: stop.signal, progressEvery: 1, onProgress: () => stop.abort() });
    expect(first).toMatchObject({ replayed: 500, stopped: true, alreadyReplayed: 0 });
    const rest = await dl().replay({ model });
    expect(rest).toMatchObject({ replayed: 700, alreadyReplayed: 501 });
    const values = await resent(dlq, source);
    expect(values).toHaveLength(1200);
    expect(values).toContain('garbage-700');
  }, 120_000);

  it('a --since window that starts between two records of one original does not re-send it again', async () => {
    const { model, dlq, source, dl } = await setup();
    const now = Date.now();
    await writeDlq(dlq, [record(source, 1, now - 60_000), record(source, 2, now - 50_000)]);
    expect(await dl().replay({ model })).toMatchObject({ replayed: 2, alreadyReplayed: 0 });
    // The worker answered original 1 again after a restart: its second record, inside the window.
    await writeDlq(dlq, [record(source, 1, now)]);
    expect(await dl().replay({ model, sinceAt: now - 10_000 })).toMatchObject({ matched: 1, replayed: 0, alreadyReplayed: 1 });
    expect(await resent(dlq, source)).toEqual(['garbage-1', 'garbage-2']);
  }, 120_000);

  it('a --since replay of the second record, then a replay of everything, re-sends the original once', async () => {
    const { model, dlq, source, dl } = await setup();
    const now = Date.now();
    await writeDlq(dlq, [record(source, 1, now - 60_000), record(source, 2, now - 55_000), record(source, 1, now)]);
    expect(await dl().replay({ model, sinceAt: now - 10_000 })).toMatchObject({ matched: 1, replayed: 1 });
    expect(await dl().replay({ model })).toMatchObject({ matched: 3, replayed: 1, alreadyReplayed: 2 });
    expect(await resent(dlq, source)).toEqual(['garbage-1', 'garbage-2']);
    expect(await dl().replay({ model })).toMatchObject({ replayed: 0, alreadyReplayed: 3 });
  }, 120_000);

  it('two records of one original under different reasons, replayed by reason one after the other, re-send it once', async () => {
    const { model, dlq, source, dl } = await setup();
    const now = Date.now();
    await writeDlq(dlq, [record(source, 1, now - 1_000, 'DEVICE_HANG'), record(source, 1, now, 'INTERNAL')]);
    expect(await dl().replay({ model, reasons: ['INTERNAL'] })).toMatchObject({ matched: 1, replayed: 1 });
    expect(await dl().replay({ model, reasons: ['DEVICE_HANG'] })).toMatchObject({ matched: 1, replayed: 0, alreadyReplayed: 1 });
    expect(await resent(dlq, source)).toEqual(['garbage-1']);
    // The listing says the record was replayed (its original was).
    const listing = await dl().list({ model });
    expect(listing.alreadyReplayed).toBe(2);
  }, 120_000);

  it('a record whose original is at the same ref but another request (a recreated request topic) is still re-sent', async () => {
    const { model, dlq, source, dl } = await setup();
    const now = Date.now();
    const first = record(source, 1, now - 1_000);
    await writeDlq(dlq, [{ ...first, value: Buffer.from(JSON.stringify({ id: 'req-a', model: 'm' })) }]);
    expect(await dl().replay({ model })).toMatchObject({ replayed: 1 });
    await writeDlq(dlq, [{ ...record(source, 1, now), value: Buffer.from(JSON.stringify({ id: 'req-b', model: 'm' })) }]);
    expect(await dl().replay({ model, sinceAt: now - 500 })).toMatchObject({ matched: 1, replayed: 1, alreadyReplayed: 0 });
  }, 120_000);
});
