// Kafka DLQ replay re-sends each record once: replays one after another, at the same time, and one
// taking over from another mid-transaction (replay-ledger.ts, replay-producer.ts); and its markers
// are kept as long as the DLQ keeps their records (marker-retention.ts).
import { ConfigResourceTypes, ConfigSource, Kafka, type IHeaders, type Producer } from 'kafkajs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import type { ReplayReport } from '../../../src/transport/dead-letters.ts';
import { KafkaDeadLetters } from '../../../src/transport/kafka/kafka-dead-letters.ts';
import { topicRanges } from '../../../src/transport/kafka/read-ranges.ts';
import { markerTopicOf, ReplayLedger } from '../../../src/transport/kafka/replay-ledger.ts';
import { REPLAY_TRANSACTIONAL_ID_PREFIX, replayTransactionalId } from '../../../src/transport/kafka/replay-producer.ts';
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

interface Setup {
  readonly model: string;
  readonly dlq: string;
  readonly sources: readonly string[];
  /** A dead-letter reader of its own (as a second operator's CLI would have). */
  reader(): KafkaDeadLetters;
}

/** Fresh names: a DLQ topic (with `dlqConfigs`) and the model's request topics p0 and p1, `partitions` each. */
async function setup(partitions: number, dlqConfigs: Record<string, string> = {}): Promise<Setup> {
  const tag = uniqueName('kro').replace(/[^A-Za-z0-9-]/g, '');
  const settings = kafkaSettings({ topicTemplate: `${tag}.{model}.requests.p{priority}`, repliesTemplate: `${tag}.{model}.replies`, dlqTemplate: `${tag}.{model}.dlq` });
  const sources = [`${tag}.m.requests.p0`, `${tag}.m.requests.p1`];
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    const configEntries = Object.entries(dlqConfigs).map(([name, value]) => ({ name, value }));
    await createTopicsSettled(admin, [{ topic: `${tag}.m.dlq`, numPartitions: partitions, configEntries }, ...sources.map((topic) => ({ topic, numPartitions: partitions }))]);
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

/** The topic's effective `names` configs (its own or the broker's default), or undefined when it does not exist. */
async function topicConfigs(topic: string, names: readonly string[]): Promise<Record<string, string> | undefined> {
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    if (!(await admin.listTopics()).includes(topic)) return undefined;
    const { resources } = await admin.describeConfigs({ includeSynonyms: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: [...names] }] });
    return Object.fromEntries((resources[0]?.configEntries ?? []).map((e) => [e.configName, e.configValue]));
  } finally {
    await admin.disconnect();
  }
}

async function cleanupPolicy(topic: string): Promise<string | undefined> {
  return (await topicConfigs(topic, ['cleanup.policy']))?.['cleanup.policy'];
}

const sorted = (values: readonly string[]): string[] => [...values].sort();

describe('Kafka DLQ replay re-sends each record once', () => {
  it('a second replay passes over what the first re-sent; list and dry runs count it; a record dead-lettered since is re-sent', async () => {
    const s = await setup(2);
    const values = await writeDlq(s, 6, 2);
    const dl = s.reader();
    expect((await dl.list({ model: s.model })).alreadyReplayed).toBe(0);
    // Before any replay: no marker topic yet, and a dry run creates none.
    expect(await dl.replay({ model: s.model, dryRun: true })).toEqual({ scanned: 6, matched: 6, replayed: 6, skipped: [], alreadyReplayed: 0, passedOver: [], refreshed: [] });
    expect(await cleanupPolicy(markerTopicOf(s.dlq))).toBeUndefined();

    expect(await dl.replay({ model: s.model })).toEqual({ scanned: 6, matched: 6, replayed: 6, skipped: [], alreadyReplayed: 0, passedOver: [], refreshed: [] });
    expect(await cleanupPolicy(markerTopicOf(s.dlq))).toBe('compact,delete');
    const second = await s.reader().replay({ model: s.model });
    expect(second).toMatchObject({ scanned: 6, matched: 6, replayed: 0, skipped: [], alreadyReplayed: 6, refreshed: [] });
    // Each record passed over says why, by record.
    expect(second.passedOver?.map((p) => p.ref).sort()).toEqual(Array.from({ length: 6 }, (_, n) => `${s.dlq}/${n % 2}/${Math.floor(n / 2)}`).sort());
    expect(second.passedOver?.every((p) => /^an earlier replay re-sent it at \d{4}-.*\.replayed\)$/.test(p.why))).toBe(true);
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

const DAY_MS = 86_400_000;
const RETENTION = ['cleanup.policy', 'retention.ms', 'retention.bytes'] as const;

/** Sets `configs` on `topic`, keeping its other overrides (AlterConfigs replaces them all). */
async function alterTopic(topic: string, configs: Record<string, string>): Promise<void> {
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    const { resources } = await admin.describeConfigs({ includeSynonyms: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }] });
    const own = (resources[0]?.configEntries ?? []).filter((e) => e.configSource === ConfigSource.TOPIC_CONFIG && !(e.configName in configs));
    const configEntries = [...own.map((e) => ({ name: e.configName, value: e.configValue })), ...Object.entries(configs).map(([name, value]) => ({ name, value }))];
    await admin.alterConfigs({ validateOnly: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries }] });
  } finally {
    await admin.disconnect();
  }
}

/**
 * The marker topic as versions before marker retention created it (compacted only, the DLQ's
 * partition count), plus a setting of the operator's own, holding a committed marker for `refs`.
 */
async function oldMarkerTopic(s: Setup, partitions: number, refs: readonly string[]): Promise<void> {
  const topic = markerTopicOf(s.dlq);
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    const configEntries = [
      { name: 'cleanup.policy', value: 'compact' },
      { name: 'max.message.bytes', value: '2000000' },
    ];
    await createTopicsSettled(admin, [{ topic, numPartitions: partitions, configEntries }]);
  } finally {
    await admin.disconnect();
  }
  const producer = adminKafka().producer();
  await producer.connect();
  try {
    const messages = refs.map((ref) => ({ key: ref, value: JSON.stringify({ replayedAt: Date.now(), source: s.sources[0] }), partition: Number(ref.split('/')[1]) % partitions }));
    await producer.send({ topic, messages, acks: -1 });
  } finally {
    await producer.disconnect();
  }
}

/** A broker refusal as kafkajs' admin.alterConfigs rejects with it (the broker's answer, passed through). */
function alterRefused(): Error {
  return Object.assign(new Error('Not authorized to access topics: [Topic authorization failed]'), { name: 'KafkaJSProtocolError', type: 'TOPIC_AUTHORIZATION_FAILED', code: 29, retriable: false });
}

describe('Kafka DLQ replay markers are kept as long as their DLQ records, and no longer', () => {
  it('the first replay creates the marker topic compacted and deleted by time (the DLQ retention.ms + segment.ms + a day); a raised DLQ retention is followed', async () => {
    const s = await setup(2, { 'retention.ms': String(3 * DAY_MS), 'segment.ms': String(DAY_MS) });
    const values = await writeDlq(s, 4, 2);
    const warnings: string[] = [];
    expect(await s.reader().replay({ model: s.model, onWarning: (m) => warnings.push(m) })).toMatchObject({ replayed: 4, skipped: [] });
    expect(await topicConfigs(markerTopicOf(s.dlq), RETENTION)).toEqual({ 'cleanup.policy': 'compact,delete', 'retention.ms': String(5 * DAY_MS), 'retention.bytes': '-1' });
    expect(warnings).toEqual([]);

    // The DLQ keeps records longer now: the next replay keeps their markers longer too.
    await alterTopic(s.dlq, { 'retention.ms': String(10 * DAY_MS) });
    const later = await writeDlq(s, 1, 2, 4);
    expect(await s.reader().replay({ model: s.model, onWarning: (m) => warnings.push(m) })).toMatchObject({ replayed: 1, alreadyReplayed: 4 });
    expect(await topicConfigs(markerTopicOf(s.dlq), RETENTION)).toMatchObject({ 'cleanup.policy': 'compact,delete', 'retention.ms': String(12 * DAY_MS) });
    // The DLQ's own settings stayed as they were.
    expect(await topicConfigs(s.dlq, ['retention.ms', 'segment.ms'])).toEqual({ 'retention.ms': String(10 * DAY_MS), 'segment.ms': String(DAY_MS) });
    expect(warnings).toEqual([]);
    expect(await resent(s)).toEqual(sorted([...values, ...later]));
  }, 120_000);

  it('a DLQ that keeps records forever (retention.ms=-1) keeps their markers forever', async () => {
    const s = await setup(1, { 'retention.ms': '-1' });
    await writeDlq(s, 2, 1);
    expect(await s.reader().replay({ model: s.model })).toMatchObject({ replayed: 2 });
    expect(await topicConfigs(markerTopicOf(s.dlq), RETENTION)).toEqual({ 'cleanup.policy': 'compact,delete', 'retention.ms': '-1', 'retention.bytes': '-1' });
    expect(await s.reader().replay({ model: s.model })).toMatchObject({ replayed: 0, alreadyReplayed: 2 });
  }, 120_000);

  it('a marker is stamped no earlier than its DLQ record (a worker clock ahead of the replay host), so its retention ends after the record', async () => {
    const s = await setup(1);
    const aheadAt = Date.now() + 20 * 60_000;
    const producer = adminKafka().producer();
    await producer.connect();
    try {
      const headers: IHeaders = { [HEADERS.dlqReason]: 'UNKNOWN_MODEL', [HEADERS.dlqMessage]: 'not served', [HEADERS.dlqSource]: `${s.sources[0] ?? ''}/0/0` };
      await producer.send({ topic: s.dlq, messages: [{ key: 'k0', value: 'r0', headers, timestamp: String(aheadAt) }], acks: -1 });
    } finally {
      await producer.disconnect();
    }
    const listing = await s.reader().list({ model: s.model });
    expect(listing.letters[0]?.deadAt).toBe(aheadAt);
    expect(await s.reader().replay({ model: s.model })).toMatchObject({ replayed: 1 });
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      // The first marker stamped at or after the record: the broker answers -1 when there is none.
      const [p] = await admin.fetchTopicOffsetsByTimestamp(markerTopicOf(s.dlq), aheadAt);
      expect(Number(p?.offset)).toBe(0);
    } finally {
      await admin.disconnect();
    }
    // When it was replayed is still the replay's own time.
    const [again] = (await s.reader().list({ model: s.model })).letters;
    expect(again?.replayedAt).toBeLessThan(aheadAt - 60_000);
  }, 120_000);

  it('a marker topic made by an older version (compacted only, markers kept forever) is brought in line by the next replay, keeping its markers and its other settings', async () => {
    const s = await setup(2);
    const values = await writeDlq(s, 4, 2);
    await oldMarkerTopic(s, 2, [`${s.dlq}/0/0`]);
    expect(await topicConfigs(markerTopicOf(s.dlq), ['cleanup.policy'])).toEqual({ 'cleanup.policy': 'compact' });
    const warnings: string[] = [];
    expect(await s.reader().replay({ model: s.model, onWarning: (m) => warnings.push(m) })).toMatchObject({ matched: 4, replayed: 3, alreadyReplayed: 1, skipped: [] });
    expect(warnings).toEqual([]);
    // The test broker's defaults, whatever they are: the DLQ sets none of its own.
    const dlq = await topicConfigs(s.dlq, ['retention.ms', 'segment.ms']);
    const wantedMs = Number(dlq?.['retention.ms']) + Number(dlq?.['segment.ms']) + DAY_MS;
    expect(await topicConfigs(markerTopicOf(s.dlq), [...RETENTION, 'max.message.bytes'])).toEqual({
      'cleanup.policy': 'compact,delete',
      'retention.ms': String(wantedMs),
      'retention.bytes': '-1',
      'max.message.bytes': '2000000',
    });
    expect(await resent(s)).toEqual(sorted(values.filter((v) => v !== 'r0')));
    expect(await s.reader().replay({ model: s.model })).toMatchObject({ replayed: 0, alreadyReplayed: 4 });
  }, 120_000);

  it('a client the brokers do not let alter the old marker topic warns once, naming the command, and replays all the same', async () => {
    const s = await setup(1);
    const values = await writeDlq(s, 3, 1);
    const topic = markerTopicOf(s.dlq);
    await oldMarkerTopic(s, 1, [`${s.dlq}/0/1`]);
    const admin = Kafka.prototype.admin;
    vi.spyOn(Kafka.prototype, 'admin').mockImplementation(function (this: Kafka, ...args: Parameters<Kafka['admin']>) {
      const a = admin.apply(this, args);
      a.alterConfigs = () => Promise.reject(alterRefused());
      return a;
    });
    const warnings: string[] = [];
    expect(await s.reader().replay({ model: s.model, onWarning: (m) => warnings.push(m) })).toMatchObject({ matched: 3, replayed: 2, alreadyReplayed: 1, skipped: [] });
    vi.restoreAllMocks();
    expect(warnings).toHaveLength(1);
    const escaped = topic.replace(/\./g, '\\.');
    expect(warnings[0]).toMatch(new RegExp(`replay marker topic ${escaped} has cleanup\\.policy=compact.* it keeps markers longer than their records`));
    expect(warnings[0]).toMatch(new RegExp(`this client may not change it\\. The replay goes on; grant this client ALTER_CONFIGS on topic ${escaped}, or run: `));
    expect(warnings[0]).toMatch(new RegExp(`kafka-configs\\.sh --bootstrap-server \\S+ --alter --entity-type topics --entity-name ${escaped} --add-config 'cleanup\\.policy=\\[compact,delete\\],retention\\.ms=\\d+,retention\\.bytes=-1'`));
    expect(await cleanupPolicy(topic)).toBe('compact');
    expect(await resent(s)).toEqual(sorted(values.filter((v) => v !== 'r1')));

    // Allowed again: the next replay fixes it and has nothing to say.
    warnings.length = 0;
    expect(await s.reader().replay({ model: s.model, onWarning: (m) => warnings.push(m) })).toMatchObject({ replayed: 0, alreadyReplayed: 3 });
    expect(warnings).toEqual([]);
    expect(await cleanupPolicy(topic)).toBe('compact,delete');
  }, 120_000);

  it('holds no marker of a record below the DLQ partition log-start offset (deleted records)', async () => {
    const s = await setup(1);
    await writeDlq(s, 4, 1);
    expect(await s.reader().replay({ model: s.model })).toMatchObject({ replayed: 4 });
    const kafka = adminKafka();
    const admin = kafka.admin();
    await admin.connect();
    try {
      // kafkajs finds the partition leaders only for topics whose metadata it loaded.
      await admin.fetchTopicMetadata({ topics: [s.dlq] });
      await admin.deleteTopicRecords({ topic: s.dlq, partitions: [{ partition: 0, offset: '2' }] });
      const { partitions, ranges } = await topicRanges(admin, s.dlq);
      expect(ranges.get(0)).toEqual({ from: 2, end: 4 });
      const ledger = await ReplayLedger.load({ kafka, admin, dlqTopic: s.dlq, dlqPartitions: partitions, dlqRanges: ranges, create: false, stallMs: 30_000 });
      expect([0, 1, 2, 3].map((o) => ledger.replayedAt(`${s.dlq}/0/${o}`) !== undefined)).toEqual([false, false, true, true]);
    } finally {
      await admin.disconnect();
    }
  }, 120_000);
});
