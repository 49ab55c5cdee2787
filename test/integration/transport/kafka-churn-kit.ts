// A consumer group under churn: real DeviceWorkers (a fake device that finishes each batch after a
// random delay) on KafkaTransports in one group, members joining and leaving every few seconds
// while requests flow, then every reply and committed offset counted.
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { KafkaSettings } from '../../../src/contracts/fleet-config.ts';
import type { ModelConfig } from '../../../src/contracts/model-config.ts';
import { decodeRequest, decodeResult } from '../../../src/codec/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { DeviceWorker } from '../../../src/runtime/device-worker.ts';
import type { DeviceLike } from '../../../src/runtime/load-checked.ts';
import { KafkaTransport, type KafkaTransportOptions } from '../../../src/transport/kafka/kafka-transport.ts';
import { MODEL, modelConfig, request, snapshotWith } from '../../unit/runtime/fake-device-worker.ts';
import { uniqueName } from '../../helpers/services.ts';
import { adminKafka, kafkaSettings } from './kafka-harness.ts';

export interface ChurnOptions {
  readonly requests: number;
  readonly exactlyOnce: boolean;
  /** A member joins or leaves this often while requests are published. */
  readonly churnEveryMs: number;
  readonly publishForMs: number;
  readonly partitions: number;
  readonly minMembers: number;
  readonly maxMembers: number;
  /** Device time per batch: uniform in [min, max]. */
  readonly batchMs: readonly [number, number];
  readonly queue?: ModelConfig['queue'];
  readonly transport?: KafkaTransportOptions;
  readonly sessionTimeoutMs?: number;
  readonly log?: (line: string) => void;
  /** The first member stays until the end: the others come and go around it. */
  readonly keepFirst?: boolean;
}

export interface ChurnReport {
  readonly requests: number;
  readonly answered: number;
  readonly lost: number;
  /** Replies beyond one per request. */
  readonly duplicates: number;
  /** ok results the members built, summed (riders of a redelivery included): printed, for a feel of the work done twice. */
  readonly served: number;
  readonly joins: number;
  readonly leaves: number;
  /** Partitions whose committed offset is short of the log end after everything settled. */
  readonly uncommitted: Array<{ topic: string; partition: number; committed: number; end: number }>;
  /** A partition's committed offset seen going backwards (a commit landing after a newer one). */
  readonly regressions: Array<{ key: string; from: number; to: number }>;
  readonly elapsedMs: number;
}

interface Member {
  readonly name: string;
  readonly worker: DeviceWorker;
  readonly metrics: FleetMetrics;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function randomDevice(batchMs: readonly [number, number]): DeviceLike {
  return {
    id: 0,
    memInfo: () => Promise.resolve({ freeBytes: 1, totalBytes: 2 }),
    close: () => Promise.resolve(),
    loadModel: () =>
      Promise.resolve({
        gears: [1, 2, 4, 8, 16, 32],
        inputs: [{ name: 'input', dtype: 'float32', dims: [-1, 64] }],
        outputs: [{ name: 'probs', dtype: 'float32', dims: [-1, 10] }],
        execute: async (_inputs, gear) => {
          await sleep(batchMs[0] + Math.random() * (batchMs[1] - batchMs[0]));
          return { outputs: [{ data: new Uint8Array(gear * 10 * 4), dims: [gear, 10] }], timings: { copyInMs: 0.1, executeMs: 1, copyOutMs: 0.1 } };
        },
        unload: () => Promise.resolve(),
      }),
  };
}

/** ok results a worker built (`npu_fleet_requests_total{status="ok"}`). */
function okCount(exposition: string): number {
  let n = 0;
  for (const line of exposition.split('\n')) if (line.startsWith('npu_fleet_requests_total{') && line.includes('status="ok"')) n += Number(line.slice(line.lastIndexOf(' ') + 1));
  return n;
}

export async function runChurn(o: ChurnOptions): Promise<ChurnReport> {
  const startedAt = Date.now();
  const say = o.log ?? (() => undefined);
  const tag = uniqueName('churn').replace(/-/g, '');
  const settings: KafkaSettings = kafkaSettings({
    groupId: `${tag}.g`,
    topicTemplate: `${tag}.{model}.requests.p{priority}`,
    repliesTemplate: `${tag}.{model}.replies`,
    dlqTemplate: `${tag}.{model}.dlq`,
    exactlyOnce: o.exactlyOnce,
    sessionTimeoutMs: o.sessionTimeoutMs ?? 10_000,
  });
  const config = parseFleetConfig({ devices: { count: 1, backend: 'sim' }, models: [MODEL], worker: { metricsPort: 0 } });
  const snapshot = snapshotWith({ ...modelConfig, ...(o.queue === undefined ? {} : { queue: o.queue }) }, '1');
  const logLines: string[] = [];
  const members: Member[] = [];
  let joins = 0;
  let leaves = 0;
  let served = 0;
  let counter = 0;

  const join = async (): Promise<void> => {
    const name = `m${++counter}`;
    const log = createLogger({ level: 'warn', destination: { write: (s: string) => void logLines.push(`${name} ${s}`) } });
    const transport = new KafkaTransport(settings, { partitions: o.partitions, instanceId: name, ...o.transport });
    const metrics = new FleetMetrics({ processMetrics: false });
    const worker = new DeviceWorker({
      config,
      // Its own device id: replies name the member that sent them (result.worker).
      deviceId: counter,
      device: randomDevice(o.batchMs),
      transport,
      metrics,
      log,
      snapshot,
    });
    await worker.start();
    members.push({ name, worker, metrics });
    joins++;
    say(`+${name} (${members.length} members) at ${Date.now() - startedAt}`);
  };
  const leave = async (keepFirst = o.keepFirst === true): Promise<void> => {
    const from = keepFirst && members.length > 1 ? 1 : 0;
    const m = members.splice(from + Math.floor(Math.random() * (members.length - from)), 1)[0];
    if (m === undefined) return;
    leaves++;
    say(`-${m.name} (${members.length} members) at ${Date.now() - startedAt}`);
    const { released, timedOut } = await m.worker.drain(20_000);
    await m.worker.close();
    served += okCount(await m.metrics.render());
    say(`-${m.name} drained: released ${released}, timedOut ${timedOut} at ${Date.now() - startedAt}`);
  };

  const replies = `${tag}.${MODEL}.replies`;
  const requestTopics = Array.from({ length: modelConfig.priorityLevels }, (_, p) => `${tag}.${MODEL}.requests.p${p}`);
  const regressions: ChurnReport['regressions'] = [];
  const admin = adminKafka().admin();
  await admin.connect();
  let watching = true;
  const seen = new Map<string, number>();
  const watcher = (async () => {
    while (watching) {
      try {
        for (const t of await admin.fetchOffsets({ groupId: settings.groupId, topics: requestTopics })) {
          for (const p of t.partitions) {
            const key = `${t.topic}/${p.partition}`;
            const offset = Number(p.offset);
            const before = seen.get(key);
            if (before !== undefined && offset < before) regressions.push({ key, from: before, to: offset });
            seen.set(key, offset);
          }
        }
      } catch {
        // topics not there yet
      }
      await sleep(100);
    }
  })();

  const producer = new KafkaProducer(settings, { partitions: o.partitions });
  const ids: string[] = [];
  try {
    await join();
    while (members.length < o.minMembers) await join();
    let churning = true;
    const churn = (async () => {
      while (churning) {
        await sleep(o.churnEveryMs * (0.5 + Math.random()));
        if (!churning) break;
        const grow = members.length <= o.minMembers || (members.length < o.maxMembers && Math.random() < 0.5);
        await (grow ? join() : leave());
      }
    })();
    const chunks = Math.max(1, Math.round(o.publishForMs / 100));
    const perChunk = Math.ceil(o.requests / chunks);
    for (let c = 0; ids.length < o.requests; c++) {
      const batch = Array.from({ length: Math.min(perChunk, o.requests - ids.length) }, (_, i) => {
        const id = `r${c}-${i}`;
        ids.push(id);
        return { ...request(id, Math.floor(Math.random() * modelConfig.priorityLevels)), replyTo: undefined };
      });
      await producer.publish(batch);
      await sleep(100);
    }
    await sleep(o.churnEveryMs * 2);
    churning = false;
    await churn;
    // Everything answered and committed: then the group is left as it is and the figures taken.
    const deadline = Date.now() + 120_000;
    let uncommitted: ChurnReport['uncommitted'] = [];
    while (Date.now() < deadline) {
      uncommitted = await lagOf(admin, settings.groupId, requestTopics);
      if (uncommitted.length === 0) break;
      await sleep(500);
    }
    while (members.length > 0) await leave(false);
    watching = false;
    await watcher;
    const counts = await countReplies(replies, ids.length);
    // The producer may have written a request twice (a retried publish): each copy is its own request.
    const copies = new Map<string, number>();
    for (const t of requestTopics) for (const [id, got] of await countRequests(t)) copies.set(id, (copies.get(id) ?? 0) + got);
    const written = [...copies.values()].reduce((a, b) => a + b, 0);
    say(`request messages ${written} for ${copies.size} ids`);
    let answered = 0;
    let duplicates = 0;
    for (const id of ids) {
      const got = counts.get(id) ?? [];
      if (got.length > 0) answered++;
      const copiesOf = copies.get(id) ?? 1;
      if (got.length > copiesOf) {
        duplicates += got.length - copiesOf;
        if (duplicates < 40) say(`dup ${id}: ${got.map((g) => `${g.worker}@${g.at - startedAt}`).join(' ')}`);
      }
    }
    const report = { requests: ids.length, answered, lost: ids.length - answered, duplicates, served, joins, leaves, uncommitted, regressions, elapsedMs: Date.now() - startedAt };
    if (report.lost > 0 || uncommitted.length > 0) for (const l of logLines.slice(-40)) say(l);
    return report;
  } finally {
    watching = false;
    await Promise.allSettled(members.splice(0).map((m) => m.worker.close()));
    await producer.close();
    await admin.disconnect();
  }
}

async function lagOf(admin: ReturnType<ReturnType<typeof adminKafka>['admin']>, groupId: string, topics: string[]): Promise<ChurnReport['uncommitted']> {
  const out: ChurnReport['uncommitted'] = [];
  const committed = await admin.fetchOffsets({ groupId, topics });
  for (const topic of topics) {
    const ends = await admin.fetchTopicOffsets(topic);
    const c = committed.find((t) => t.topic === topic);
    for (const p of ends) {
      const at = Number(c?.partitions.find((x) => x.partition === p.partition)?.offset ?? -1);
      if (Number(p.high) > 0 && at < Number(p.high)) out.push({ topic, partition: p.partition, committed: at, end: Number(p.high) });
    }
  }
  return out;
}

/** Replies per request id, read (read_committed) until the topic is quiet. */
async function countReplies(topic: string, atLeast: number): Promise<Map<string, Array<{ worker: string; at: number }>>> {
  const consumer = adminKafka().consumer({ groupId: uniqueName('churn-reader'), maxWaitTimeInMs: 100 });
  const counts = new Map<string, Array<{ worker: string; at: number }>>();
  let total = 0;
  let lastAt = Date.now();
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => {
        const r = decodeResult(message.value ?? Buffer.alloc(0));
        counts.set(r.id, [...(counts.get(r.id) ?? []), { worker: `m${r.device}`, at: Number(message.timestamp) }]);
        total++;
        lastAt = Date.now();
      },
    });
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline && (total < atLeast || Date.now() - lastAt < 3_000)) await sleep(100);
  } finally {
    await consumer.disconnect();
  }
  return counts;
}

/** Messages per request id in a request topic (a retried publish may have written one twice). */
async function countRequests(topic: string): Promise<Map<string, number>> {
  const consumer = adminKafka().consumer({ groupId: uniqueName('churn-reader'), maxWaitTimeInMs: 100 });
  const admin = adminKafka().admin();
  await admin.connect();
  const end = (await admin.fetchTopicOffsets(topic)).reduce((a, p) => a + Number(p.high), 0);
  await admin.disconnect();
  const counts = new Map<string, number>();
  let total = 0;
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => {
        const r = decodeRequest(message.value ?? Buffer.alloc(0));
        counts.set(r.id, (counts.get(r.id) ?? 0) + 1);
        total++;
      },
    });
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && total < end) await sleep(100);
  } finally {
    await consumer.disconnect();
  }
  return counts;
}
