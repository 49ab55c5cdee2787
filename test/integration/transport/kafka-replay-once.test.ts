// Kafka DLQ replay re-sends each record once: replays one after another, at the same time, and one
// taking over from another mid-transaction (replay-ledger.ts, replay-producer.ts).
import { ConfigResourceTypes, Kafka, type IHeaders, type Producer } from 'kafkajs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import type { ReplayReport } from '../../../src/transport/dead-letters.ts';
import { KafkaDeadLetters } from '../../../src/transport/kafka/kafka-dead-letters.ts';
import { markerTopicOf } from '../../../src/transport/kafka/replay-ledger.ts';
import { REPLAY_TRANSACTIONAL_ID_PREFIX, replayTransactionalId } from '../../../src/transport/kafka/replay-producer.ts';
import { HEADERS } from '../../../src/transport/names.ts';
import { uniqueName } from '../../helpers/services.ts';
import { adminKafka, kafkaSettings } from './kafka-harness.ts';
import { readCommitted, transactionsSettled } from './kafka-topic-reader.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  vi.restoreAllMocks();
  await Promise.allSettled(open.splice(0).map((x) => x.close()));
});

interface Setup {
  readonly model: string;
  readonly dlq: string;
  readonly sources: readonly string[];
  /** A dead-letter reader of its own (as a second operator's CLI would have). */
  reader(): KafkaDeadLetters;
}

/** Fresh names: a DLQ topic and the model's request topics p0 and p1, `partitions` each. */
async function setup(partitions: number): Promise<Setup> {
  const tag = uniqueName('kro').replace(/[^A-Za-z0-9-]/g, '');
  const settings = kafkaSettings({ topicTemplate: `${tag}.{model}.requests.p{priority}`, repliesTemplate: `${tag}.{model}.replies`, dlqTemplate: `${tag}.{model}.dlq` });
  const sources = [`${tag}.m.requests.p0`, `${tag}.m.requests.p1`];
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    await admin.createTopics({ topics: [`${tag}.m.dlq`, ...sources].map((topic) => ({ topic, numPartitions: partitions })), waitForLeaders: true });
  } finally {
    await admin.disconnect();
  }
  return {
    model: 'm',
    dlq: `${tag}.m.dlq`,
    sources,
    reader: () => {
      const dl = new KafkaDeadLetters(settings);
      open.push(dl);
      return dl;
    },
  };
}

/** `count` DLQ records spread over the DLQ's partitions and both sources; values `r<n>`. */
async function writeDlq(s: Setup, count: number, partitions: number, first = 0): Promise<string[]> {
  const values: string[] = [];
  const messages = Array.from({ length: count }, (_, i) => {
    const n = first + i;
    const source = s.sources[n % 2] ?? '';
    values.push(`r${n}`);
    const headers: IHeaders = { [HEADERS.dlqReason]: 'UNKNOWN_MODEL', [HEADERS.dlqMessage]: 'not served', [HEADERS.dlqSource]: `${source}/0/${n}` };
    return { key: `k${n}`, value: `r${n}`, headers, partition: n % partitions };
  });
  const producer = adminKafka().producer();
  await producer.connect();
  try {
    await producer.send({ topic: s.dlq, messages, acks: -1 });
  } finally {
    await producer.disconnect();
  }
  return values;
}

/** What the workers read from both sources once the replays' last transaction is complete: the committed values, sorted. */
async function resent(s: Setup): Promise<string[]> {
  await transactionsSettled(replayTransactionalId(s.dlq));
  const all = await Promise.all(s.sources.map((t) => readCommitted(t)));
  return all.flat().map((m) => m.value?.toString() ?? '').sort();
}

/** The topic's cleanup.policy, or undefined when it does not exist. */
async function cleanupPolicy(topic: string): Promise<string | undefined> {
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    if (!(await admin.listTopics()).includes(topic)) return undefined;
    const { resources } = await admin.describeConfigs({ includeSynonyms: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['cleanup.policy'] }] });
    return resources[0]?.configEntries[0]?.configValue;
  } finally {
    await admin.disconnect();
  }
}

const sorted = (values: readonly string[]): string[] => [...values].sort();

describe('Kafka DLQ replay re-sends each record once', () => {
  it('a second replay passes over what the first re-sent; list and dry runs count it; a record dead-lettered since is re-sent', async () => {
    const s = await setup(2);
    const values = await writeDlq(s, 6, 2);
    const dl = s.reader();
    expect((await dl.list({ model: s.model })).alreadyReplayed).toBe(0);
    // Before any replay: no marker topic yet, and a dry run creates none.
    expect(await dl.replay({ model: s.model, dryRun: true })).toEqual({ scanned: 6, matched: 6, replayed: 6, skipped: [], alreadyReplayed: 0 });
    expect(await cleanupPolicy(markerTopicOf(s.dlq))).toBeUndefined();

    expect(await dl.replay({ model: s.model })).toEqual({ scanned: 6, matched: 6, replayed: 6, skipped: [], alreadyReplayed: 0 });
    expect(await cleanupPolicy(markerTopicOf(s.dlq))).toBe('compact');
    const second = await s.reader().replay({ model: s.model });
    expect(second).toEqual({ scanned: 6, matched: 6, replayed: 0, skipped: [], alreadyReplayed: 6 });
    expect(await resent(s)).toEqual(sorted(values));

    const listing = await dl.list({ model: s.model });
    expect(listing).toMatchObject({ scanned: 6, matched: 6, alreadyReplayed: 6 });
    expect(listing.letters.every((l) => typeof l.replayedAt === 'number' && l.replayedAt <= Date.now())).toBe(true);
    expect(await dl.replay({ model: s.model, dryRun: true })).toMatchObject({ replayed: 0, alreadyReplayed: 6 });

    // Dead-lettered again after the replay: a new record, re-sent by the next run, alone.
    const later = await writeDlq(s, 1, 2, 6);
    expect(await dl.replay({ model: s.model, dryRun: true })).toMatchObject({ matched: 7, replayed: 1, alreadyReplayed: 6 });
    expect(await dl.replay({ model: s.model })).toMatchObject({ matched: 7, replayed: 1, alreadyReplayed: 6, skipped: [] });
    expect(await resent(s)).toEqual(sorted([...values, ...later]));
    expect((await readCommitted(markerTopicOf(s.dlq))).map((m) => m.key?.toString()).sort()).toEqual(
      Array.from({ length: 7 }, (_, n) => `${s.dlq}/${n % 2}/${Math.floor(n / 2)}`).sort(),
    );
  }, 120_000);

  it('--limit counts only records it re-sends: a rerun with the same limit re-sends the next ones', async () => {
    const s = await setup(1);
    const values = await writeDlq(s, 5, 1);
    const dl = s.reader();
    expect(await dl.replay({ model: s.model, limit: 2 })).toMatchObject({ replayed: 2, alreadyReplayed: 0 });
    expect(await dl.replay({ model: s.model, limit: 2 })).toMatchObject({ replayed: 2, alreadyReplayed: 2 });
    expect(await dl.replay({ model: s.model, limit: 2 })).toMatchObject({ replayed: 1, alreadyReplayed: 4 });
    expect(await resent(s)).toEqual(sorted(values));
  }, 120_000);

  it('two replays started at the same time re-send each record once in total; one of them is taken over or passes records over', async () => {
    const s = await setup(2);
    const values = await writeDlq(s, 400, 2);
    const settled = await Promise.allSettled([s.reader().replay({ model: s.model }), s.reader().replay({ model: s.model })]);
    const reports = settled.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    const failures = settled.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
    for (const f of failures) expect(f instanceof FleetError ? f.details : f, String(f)).toMatchObject({ replayTakenOver: true });
    const takenOver = failures as FleetError[];
    expect(reports.length).toBeGreaterThanOrEqual(1);
    // Every record re-sent by exactly one of them: counted by the replays, and on the request topics.
    const counted = reports.reduce((n, r) => n + r.replayed, 0) + takenOver.reduce((n, f) => n + Number(f.details['replayed']), 0);
    expect(counted).toBe(400);
    expect(takenOver.length > 0 || reports.some((r) => (r.alreadyReplayed ?? 0) > 0)).toBe(true);
    expect(await resent(s)).toEqual(sorted(values));
    expect(await s.reader().replay({ model: s.model })).toMatchObject({ replayed: 0, alreadyReplayed: 400 });
  }, 180_000);

  it('a replay started while another is mid-transaction takes over: the other stops saying so, its open transaction is undone, nothing is re-sent twice or lost', async () => {
    const s = await setup(2);
    const values = await writeDlq(s, 10, 2);
    // Replay A holds its second chunk's transaction open (sent, not committed) until replay B has
    // fenced it. The DLQ's two partitions are read one after the other: one transaction each.
    let aHolding: () => void = () => undefined;
    const aHeld = new Promise<void>((r) => (aHolding = r));
    let bFenced: () => void = () => undefined;
    const fenced = new Promise<void>((r) => (bFenced = r));
    let made = 0;
    const producer = Kafka.prototype.producer;
    vi.spyOn(Kafka.prototype, 'producer').mockImplementation(function (this: Kafka, ...args: Parameters<Kafka['producer']>): Producer {
      const p = producer.apply(this, args);
      if (args[0]?.transactionalId?.startsWith(REPLAY_TRANSACTIONAL_ID_PREFIX) !== true) return p;
      const which = made++;
      let calls = 0;
      const transaction = p.transaction.bind(p);
      p.transaction = async () => {
        const txn = await transaction();
        calls++;
        // A's calls: 1 fences at open, 2 and 3 carry the partitions' chunks.
        if (which === 0 && calls === 3) {
          const commit = txn.commit.bind(txn);
          txn.commit = async () => {
            aHolding();
            await fenced;
            return commit();
          };
        }
        // B's first transaction returns once the broker fenced A (and aborted its open transaction).
        if (which === 1 && calls === 1) bFenced();
        return txn;
      };
      return p;
    });
    const a = s.reader().replay({ model: s.model });
    const aFailed = a.then(
      () => undefined,
      (err: unknown) => err,
    );
    await Promise.race([aHeld, a]);
    const b: ReplayReport = await s.reader().replay({ model: s.model });
    const err = await aFailed;
    expect(err).toBeInstanceOf(FleetError);
    expect((err as FleetError).message).toMatch(/another replay of it started and took over .*this one re-sent 5 record\(s\) before that/);
    expect((err as FleetError).details).toMatchObject({ replayTakenOver: true, replayed: 5 });
    expect(b).toMatchObject({ matched: 10, replayed: 5, alreadyReplayed: 5, skipped: [] });
    // A's second chunk reached the request topic inside its transaction, which B's start aborted:
    // the workers (read_committed) see each record once.
    expect(await resent(s)).toEqual(sorted(values));
    vi.restoreAllMocks();
    expect(await s.reader().replay({ model: s.model })).toMatchObject({ replayed: 0, alreadyReplayed: 10 });
  }, 120_000);
});
