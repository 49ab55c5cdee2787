// An exactly-once worker whose broker goes away under load: stopped cleanly, killed (SIGKILL),
// paused (SIGSTOP: every request times out instead of being refused) and away for longer than the
// transaction timeout. Its transactions fail on the way (mid-send, mid-commit, fenced by the
// coordinator's abort of an expired one) and every failure must leave the settle retriable, never
// pending for good and never answered twice. The tests share a broker of this file's own (never
// the shared test broker: it is stopped and killed here), back up after each outage; each test has
// request and reply topics, group and transactional id of its own on it.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, describe, expect, it } from 'vitest';
import { decodeResult, encodeRequest } from '../../../src/codec/index.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { runWorker, type RunningWorker } from '../../../src/runtime/worker-process.ts';
import { LostMemberRestarter } from '../../../src/transport/kafka/lost-member-watch.ts';
import { startLocalKafka, type LocalKafka } from '../../helpers/local-kafka-service.ts';
import { mlpRequest } from '../../helpers/mlp-request.ts';
import { orderedCleanups } from '../../helpers/ordered-cleanups.ts';
import { uniqueName } from '../../helpers/services.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';

const cleanups = orderedCleanups(30_000);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * The worker's transaction timeout (transport.kafka.transactionTimeoutMs) in the case that outlasts
 * it: short, so the outage need not be 75 s long, yet far above any transaction of a worker at work
 * on a loaded machine (the other cases keep the 60 s default and stay well within it).
 */
const SHORT_TRANSACTION_TIMEOUT_MS = 10_000;

/** This file's broker, started by the first test: a start costs 10-20 s on a loaded machine, a restart after an outage less. */
let broker: { kafka: LocalKafka; workDir: string } | undefined;
afterAll(async () => {
  await broker?.kafka.stop();
  if (broker !== undefined) rmSync(broker.workDir, { recursive: true, force: true });
});
async function fileBroker(): Promise<{ kafka: LocalKafka; workDir: string }> {
  if (broker !== undefined) return broker;
  const workDir = mkdtempSync(join(tmpdir(), 'npu-fleet-eos-outage-kafka-'));
  broker = { kafka: await startLocalKafka(workDir), workDir };
  return broker;
}

/** Results on `topic` as a read_committed reader (kafkajs's default) sees them: id → how many times. */
class ReplyCounter {
  readonly counts = new Map<string, number>();
  readonly notOk: string[] = [];
  /** Per partition, the next offset not yet counted: a refetch after a rejoin does not count twice. */
  private readonly next = new Map<number, number>();

  static async start(kafka: Kafka, topic: string): Promise<ReplyCounter> {
    const counter = new ReplyCounter();
    // The broker's smallest session: after its restart this reader's rejoin waits for its old
    // member's session to expire (as the worker's did before it removed that member), and with
    // kafkajs's 30 s it would time the reader, not the worker.
    const consumer = kafka.consumer({ groupId: uniqueName('eos-outage-reader'), maxWaitTimeInMs: 100, readUncommitted: false, sessionTimeout: 6_000, heartbeatInterval: 500 });
    const run = (): Promise<void> =>
      consumer.run({
        eachBatch: async ({ batch }) => {
          for (const m of batch.messages) {
            const offset = Number(m.offset);
            if (offset < (counter.next.get(batch.partition) ?? 0)) continue;
            counter.next.set(batch.partition, offset + 1);
            const result = decodeResult(m.value ?? Buffer.alloc(0));
            counter.counts.set(result.id, (counter.counts.get(result.id) ?? 0) + 1);
            if (result.status !== 'ok') counter.notOk.push(`${result.id}: ${result.status}`);
          }
        },
      });
    // Kept reading through the outages as the worker's own consumers are: kafkajs gives a consumer
    // up for good when no broker names its coordinator (a run saw this reader crash so at the
    // broker's SIGTERM, and the drill then waited for replies nobody read), or leaves it fetching
    // outside its group (see LostMemberRestarter).
    let closed = false;
    const restarter = new LostMemberRestarter(consumer, { heartbeatIntervalMs: 500, sessionTimeoutMs: 6_000, what: `the drill's reader of ${topic}`, isClosed: () => closed, rerun: run });
    cleanups.push(() => {
      closed = true;
      restarter.stop();
      return consumer.disconnect();
    });
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await run();
    restarter.start();
    return counter;
  }

  answered(ids: readonly string[]): number {
    return ids.filter((id) => this.counts.has(id)).length;
  }

  twice(): string[] {
    return [...this.counts].filter(([, n]) => n > 1).map(([id, n]) => `${id} x${n}`);
  }
}

/**
 * Publishes requests with an idempotent producer: the client's own producer is not (kafkajs
 * retries a produce whose answer a broker restart lost), and a request written twice would be
 * answered twice for a reason that is not the worker's.
 */
async function requestPublisher(kafka: Kafka, requestTopic: string): Promise<{ publish(requests: readonly RequestEnvelope[]): Promise<void> }> {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
  cleanups.push(() => producer.disconnect());
  await producer.connect();
  return {
    publish: async (requests) => {
      for (let i = 0; i < requests.length; i += 500) {
        const messages = requests.slice(i, i + 500).map((r) => ({ key: r.id, value: encodeRequest(r) }));
        await producer.send({ topic: requestTopic, messages, acks: -1 });
      }
    },
  };
}

interface Outage {
  /** How the broker goes away. */
  readonly signal: 'SIGTERM' | 'SIGKILL' | 'SIGSTOP';
  /** How long it stays away. */
  readonly awayMs: number;
  /** transport.kafka.transactionTimeoutMs of the worker; unset: the default. */
  readonly transactionTimeoutMs?: number;
}

async function outageUnderLoad(name: string, outage: Outage): Promise<void> {
  const { kafka, workDir } = await fileBroker();
  const brokerLog = join(workDir, `kafka-${kafka.brokers[0]?.split(':')[1]}`, 'broker.log');
  const timedOutSoFar = (): number => readFileSync(brokerLog, 'utf8').match(/rollback of ongoing transaction .* due to timeout/g)?.length ?? 0;
  const timedOutBefore = timedOutSoFar();
  // The requests of earlier tests stay on the broker: this worker reads topics no other test wrote.
  const tag = uniqueName(name);
  const requestTopic = `${tag}.mlp-classifier.requests.p0`;
  const client = new Kafka({ clientId: 'eos-outage-test', brokers: kafka.brokers, logLevel: logLevel.NOTHING });
  const replyTo = uniqueName(`${name}-replies`);
  const admin = client.admin();
  await admin.connect();
  await createTopicsSettled(admin, [{ topic: replyTo, numPartitions: 2 }]);
  await admin.disconnect();

  process.env.NPU_FLEET_DEVICE = 'sim';
  // Warnings kept: the failed settles, counted in the log.
  const warnings: string[] = [];
  const log = createLogger({ level: 'warn', destination: { write: (line: string) => void warnings.push(line) } });
  const config = parseFleetConfig({
    transport: {
      kind: 'kafka',
      kafka: {
        brokers: kafka.brokers,
        groupId: tag,
        topicTemplate: `${tag}.{model}.requests.p{priority}`,
        exactlyOnce: true,
        ...(outage.transactionTimeoutMs === undefined ? {} : { transactionTimeoutMs: outage.transactionTimeoutMs }),
      },
    },
    devices: { count: 1, backend: 'sim' },
    models: ['mlp-classifier'],
    worker: { metricsPort: 0 },
  });
  const running: RunningWorker = await runWorker(config, 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
  let stopped = false;
  cleanups.push(() => (stopped ? Promise.resolve() : running.stop()));
  const states = new Set<string>();
  const watch = setInterval(() => states.add(running.worker.status), 50);
  cleanups.push(async () => clearInterval(watch));

  const replies = await ReplyCounter.start(client, replyTo);
  const producer = await requestPublisher(client, requestTopic);

  // The load: far more than the worker answers in the time before the broker goes, so
  // transactions are in flight (and most of the requests still to come) when it does.
  const before = Array.from({ length: 6_000 }, (_, i) => `${name}-a${i}`);
  await producer.publish(before.map((id) => mlpRequest(id, replyTo)));
  const loadAt = Date.now();
  for (const until = Date.now() + 60_000; replies.answered(before) < 300 && Date.now() < until; ) await sleep(20);
  const answeredBefore = replies.answered(before);
  console.log(`[${name}] ${answeredBefore} of ${before.length} answered ${Date.now() - loadAt} ms into the load; broker ${outage.signal}, away ${outage.awayMs} ms`);
  expect(answeredBefore).toBeGreaterThan(0);
  expect(answeredBefore, 'requests still to answer when the broker goes').toBeLessThan(before.length);

  const pid = kafka.pid as number;
  process.kill(pid, outage.signal);
  await sleep(outage.awayMs);
  if (outage.signal === 'SIGSTOP') process.kill(pid, 'SIGCONT');
  else await kafka.restart({});
  const backAt = Date.now();

  // Served again: requests published after the broker's return are answered within a bound. A
  // publish that fails may have written part of its requests: each attempt has ids of its own, so
  // a request published twice cannot pass for a result written twice.
  let after: string[] = [];
  for (let attempt = 0; ; attempt++) {
    after = Array.from({ length: 50 }, (_, i) => `${name}-b${attempt}-${i}`);
    try {
      await producer.publish(after.map((id) => mlpRequest(id, replyTo)));
      break;
    } catch (err) {
      if (Date.now() - backAt > 30_000) throw err;
      await sleep(500);
    }
  }
  const publishedAfterMs = Date.now() - backAt;
  const all = [...before, ...after];
  let beforeDoneMs: number | undefined;
  for (const until = Date.now() + 120_000; replies.answered(all) < all.length && Date.now() < until; ) {
    if (beforeDoneMs === undefined && replies.answered(before) === before.length) beforeDoneMs = Date.now() - backAt;
    await sleep(100);
  }
  const servedAfterMs = Date.now() - backAt;
  console.log(
    `[${name}] broker back; published again after ${publishedAfterMs} ms, the first load answered after ${beforeDoneMs ?? servedAfterMs} ms, ` +
      `${replies.answered(all)} of ${all.length} after ${servedAfterMs} ms; twice: ${replies.twice().length}`,
  );
  expect(all.length - replies.answered(all), 'requests never answered').toBe(0);
  expect(servedAfterMs, 'ms from the broker back to every request answered').toBeLessThan(30_000);

  clearInterval(watch);
  expect([...states].filter((s) => s !== 'running'), 'worker states other than running while it served').toEqual([]);

  // No settle pending for good: the drain (which waits for every settle) ends, and clean.
  const stopAt = Date.now();
  const exitCode = await running.stop();
  stopped = true;
  const failedSettles = warnings.filter((w) => w.includes('settle failed; retrying')).length;
  const timedOut = timedOutSoFar() - timedOutBefore;
  console.log(`[${name}] stop: exit code ${exitCode} after ${Date.now() - stopAt} ms; ${failedSettles} settles failed and were retried; transactions the broker rolled back as timed out: ${timedOut}`);
  // Not asserted: whether a transaction was under way at the outage or the committer waited for the
  // consumer's rejoin instead. Since settles no longer hold publisher slots (be0f9d9) the results
  // go out in fewer, larger transactions, and runs saw 0 (stop, pause, away long) as well as 30 (kill).
  expect(exitCode).toBe(0);
  expect(Date.now() - stopAt).toBeLessThan(30_000);

  // Given time for a late duplicate (a transaction committed by the restarted coordinator) to show.
  await sleep(2_000);
  expect(replies.twice(), 'answered twice (read_committed)').toEqual([]);
  expect(replies.notOk.slice(0, 5), 'answered with other than ok').toEqual([]);
}

describe('kafka transport, exactly-once: the broker goes away under load', () => {
  it('stopped cleanly and back after 10 s: every request answered once, the worker serves on and drains', async () => {
    await outageUnderLoad('eos-stop', { signal: 'SIGTERM', awayMs: 10_000 });
  }, 300_000);

  it('killed (SIGKILL) and back after 10 s: every request answered once, the worker serves on and drains', async () => {
    await outageUnderLoad('eos-kill', { signal: 'SIGKILL', awayMs: 10_000 });
  }, 300_000);

  it('paused (SIGSTOP) for 35 s, its requests timing out: every request answered once, the worker serves on and drains', async () => {
    await outageUnderLoad('eos-pause', { signal: 'SIGSTOP', awayMs: 35_000 });
  }, 300_000);

  it('killed and away longer than the transaction timeout: every request answered once, the worker serves on and drains', async () => {
    await outageUnderLoad('eos-expired', { signal: 'SIGKILL', awayMs: SHORT_TRANSACTION_TIMEOUT_MS + 15_000, transactionTimeoutMs: SHORT_TRANSACTION_TIMEOUT_MS });
  }, 300_000);
});
