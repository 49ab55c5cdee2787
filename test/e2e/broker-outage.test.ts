// Broker outage drills (the "pause" and "restart" nemeses of Jepsen-style tests): the broker
// freezes mid-load for longer than the consumer session (Kafka) or the job locks (BullMQ), or is
// restarted on its own data, then comes back. The worker must keep running and every request must
// still be answered; duplicates are counted. A broker that comes back refusing the worker makes it
// drain and exit for its supervisor. Each drill runs its own broker, so it touches no other test.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { Kafka, logLevel } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../src/contracts/config-loader.ts';
import type { TransportSettings } from '../../src/contracts/fleet-config.ts';
import type { RequestEnvelope } from '../../src/contracts/request-envelope.ts';
import { transportFor } from '../../src/cli/worker-deps.ts';
import { openDevice } from '../../src/device/index.ts';
import { createLogger } from '../../src/observability/logger.ts';
import { createProducer } from '../../src/producer/index.ts';
import { EXIT_FATAL, runWorker } from '../../src/runtime/worker-process.ts';
import type { FleetError } from '../../src/errors/fleet-error.ts';
import { startLocalKafka } from '../helpers/local-kafka-service.ts';
import { startLocalRedis } from '../helpers/local-redis-service.ts';
import { uniqueName } from '../helpers/services.ts';

const TOTAL = 3000;
const BATCH = 50;
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

function request(i: number, replyTo: string): RequestEnvelope {
  const data = new Uint8Array(64 * 4);
  new DataView(data.buffer).setFloat32(0, i % 11, true);
  return { id: `outage-${i}`, model: 'mlp-classifier', priority: i % 3, createdAt: Date.now(), replyTo, inputs: [{ name: 'input', dtype: 'float32', shape: [1, 64], data }] };
}

/** Publishes TOTAL requests at a steady pace, freezing the broker once a third is out; counts replies. */
async function drill(transport: TransportSettings, freeze: () => Promise<void>, thaw: () => Promise<void>, freezeMs: number) {
  process.env.NPU_FLEET_DEVICE = 'sim';
  const log = createLogger({ level: 'error' });
  const config = parseFleetConfig({ transport, devices: { count: 1, backend: 'sim' }, models: ['mlp-classifier'], worker: { metricsPort: 0 } });
  const worker = await runWorker(config, 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
  cleanups.push(() => worker.stop());
  const producer = createProducer(config.transport, {});
  cleanups.push(() => producer.close());
  const replyTo = uniqueName('outage-replies');
  const answers = new Map<string, number>();
  const sub = await producer.subscribeReplies(replyTo, (r) => void answers.set(r.id, (answers.get(r.id) ?? 0) + 1));
  cleanups.push(() => sub.close());
  // /readyz as a kubelet sees it, polled through the drill: the reasons it gave when not ready.
  const readyz = async (): Promise<string> => {
    const res = await fetch(`http://127.0.0.1:${worker.metricsPort}/readyz`);
    const body = (await res.json()) as { reason?: string };
    return res.status === 200 ? 'ready' : `${res.status} ${body.reason ?? ''}`;
  };
  const unready = new Set<string>();
  let polling = true;
  const poller = (async () => {
    while (polling) {
      const answer = await readyz().catch((err: unknown) => `unanswered ${String(err)}`);
      if (answer !== 'ready') unready.add(answer);
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  let thawed: Promise<void> | undefined;
  let longestPublishMs = 0;
  let publishRetries = 0;
  for (let i = 0; i < TOTAL; i += BATCH) {
    if (i === TOTAL / 3 - ((TOTAL / 3) % BATCH)) {
      await freeze();
      thawed = new Promise<void>((resolve) => setTimeout(resolve, freezeMs)).then(thaw);
    }
    // Publishing blocks while the broker is frozen: the producer side of the outage.
    const publishAt = Date.now();
    // As a producing service would: a publish that gave up while the broker was away (kafkajs
    // retries for a few seconds only; a restart on a busy machine can take longer) is sent again.
    for (;;) {
      try {
        await producer.publish(Array.from({ length: BATCH }, (_, k) => request(i + k, replyTo)));
        break;
      } catch (err) {
        if (Date.now() - publishAt > 60_000) throw err;
        publishRetries++;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    longestPublishMs = Math.max(longestPublishMs, Date.now() - publishAt);
    await new Promise((r) => setTimeout(r, 20));
  }
  await thawed;
  const publishedAt = Date.now();
  const deadline = publishedAt + 90_000;
  while (answers.size < TOTAL && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  const duplicates = [...answers.values()].reduce((n, c) => n + c - 1, 0);
  const lastAnswerMs = Date.now() - publishedAt;
  polling = false;
  await poller;
  // Ready again once the broker answers (Kafka: the next heartbeat, within a few seconds).
  let readyAtEnd = await readyz();
  for (const until = Date.now() + 15_000; readyAtEnd !== 'ready' && Date.now() < until; readyAtEnd = await readyz()) await new Promise((r) => setTimeout(r, 250));
  return { answered: answers.size, duplicates, status: worker.worker.status, longestPublishMs, publishRetries, lastAnswerMs, unready: [...unready], readyAtEnd };
}

type DrillResult = Awaited<ReturnType<typeof drill>>;

/** The verdict every drill shares: the outage really blocked the producer, nothing went unanswered, the worker lives. */
function expectSurvived(name: string, r: DrillResult, blockedAtLeastMs: number): void {
  console.log(`[${name}] answered ${r.answered}/${TOTAL}, duplicates ${r.duplicates}, worker ${r.status}, longest publish ${r.longestPublishMs} ms (${r.publishRetries} publish retries), all answered ${r.lastAnswerMs} ms after the last publish; /readyz not ready as ${JSON.stringify(r.unready)}, at the end ${r.readyAtEnd}`);
  expect(r.longestPublishMs, 'the outage really blocked the producer').toBeGreaterThan(blockedAtLeastMs);
  expect(r.answered).toBe(TOTAL);
  expect(r.status).toBe('running');
  expect(r.readyAtEnd, '/readyz once the broker is back').toBe('ready');
}

/** A broker of the drill's own, and Kafka settings for a worker group on it. */
async function ownKafka(tag: string) {
  const kafka = await startLocalKafka(mkdtempSync(join(tmpdir(), `npu-fleet-${tag}-kafka-`)));
  cleanups.push(() => kafka.stop());
  const groupId = uniqueName(tag);
  const transport = parseFleetConfig({ transport: { kind: 'kafka', kafka: { brokers: kafka.brokers, sessionTimeoutMs: 8_000, groupId } } }).transport;
  return { kafka, groupId, transport };
}

/** A Redis of the drill's own, and an admin connection to it. */
async function ownRedis(tag: string) {
  const redis = await startLocalRedis(mkdtempSync(join(tmpdir(), `npu-fleet-${tag}-redis-`)));
  cleanups.push(() => redis.stop());
  const admin = new Redis(redis.url);
  // It reconnects through a restart drill like any client; without a listener ioredis prints each try.
  admin.on('error', () => undefined);
  cleanups.push(async () => admin.disconnect());
  return { redis, admin };
}

describe('broker outage drills', () => {
  it('kafka: the broker frozen (SIGSTOP) past the session timeout, then resumed: every request answered, worker keeps running', async () => {
    const { kafka, transport } = await ownKafka('outage');
    const pid = kafka.pid;
    expect(pid, 'broker pid').toBeTypeOf('number');
    // If the test fails mid-freeze, the broker must not stay stopped for the next one.
    cleanups.push(async () => process.kill(pid as number, 'SIGCONT'));
    const r = await drill(transport, async () => void process.kill(pid as number, 'SIGSTOP'), async () => void process.kill(pid as number, 'SIGCONT'), 12_000);
    expectSurvived('outage kafka', r, 6_000);
    expect(r.unready, '/readyz while the broker was frozen').toContain('503 broker unreachable');
  }, 180_000);

  it('kafka: the broker restarted mid-load (stopped, then started on the same data): every request answered, worker keeps running', async () => {
    const { kafka, transport } = await ownKafka('restart');
    let restarted: Promise<void> | undefined;
    const r = await drill(transport, async () => void (restarted = kafka.restart({})), async () => restarted, 0);
    expectSurvived('restart kafka', r, 2_000);
  }, 240_000);

  it('kafka: the broker comes back refusing the worker (its session timeout now out of range): the worker fails, drains and exits 70, having answered what it held', async () => {
    const { kafka, groupId, transport } = await ownKafka('refusal');
    process.env.NPU_FLEET_DEVICE = 'sim';
    const log = createLogger({ level: 'silent' });
    const config = parseFleetConfig({ transport, devices: { count: 1, backend: 'sim' }, models: ['mlp-classifier'], worker: { metricsPort: 0 } });
    const failures: FleetError[] = [];
    const worker = await runWorker(config, 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, {
      log,
      metricsPort: 0,
      onTransportFailure: (err) => failures.push(err),
    });
    let stopped = false;
    cleanups.push(async () => (stopped ? undefined : worker.stop()));
    const producer = createProducer(config.transport, {});
    cleanups.push(() => producer.close());
    const replyTo = uniqueName('refusal-replies');
    const answers = new Set<string>();
    const sub = await producer.subscribeReplies(replyTo, (r) => void answers.add(r.id));
    cleanups.push(() => sub.close());
    await producer.publish(Array.from({ length: 100 }, (_, i) => request(i, replyTo)));
    for (const until = Date.now() + 30_000; answers.size < 100 && Date.now() < until; ) await new Promise((r) => setTimeout(r, 50));
    expect(answers.size, 'answered before the broker changed').toBe(100);

    // An operator raises the broker's minimum session timeout above the worker's 8 s; a new member
    // then makes the group rebalance, and the worker's rejoin is refused for good.
    await kafka.restart({ 'group.min.session.timeout.ms': '20000' });
    const other = new Kafka({ clientId: 'refusal-other', brokers: kafka.brokers, logLevel: logLevel.NOTHING }).consumer({ groupId, sessionTimeout: 30_000 });
    cleanups.push(() => other.disconnect());
    await other.connect();
    await other.subscribe({ topics: ['mlp-classifier.requests.p0'], fromBeginning: true });
    await other.run({ eachMessage: async () => undefined });
    for (const until = Date.now() + 60_000; failures.length === 0 && Date.now() < until; ) await new Promise((r) => setTimeout(r, 100));
    console.log(`[refusal kafka] failure: ${failures[0]?.message ?? 'none'}`);
    expect(failures[0]?.code).toBe('INVALID_CONFIG');
    expect(failures[0]?.details['field']).toBe('transport.kafka.sessionTimeoutMs');
    expect(worker.worker.status).toBe('failed');
    const health = await fetch(`http://127.0.0.1:${worker.metricsPort}/healthz`);
    const ready = await fetch(`http://127.0.0.1:${worker.metricsPort}/readyz`);
    expect([health.status, ready.status]).toEqual([503, 503]);
    stopped = true;
    expect(await worker.stop()).toBe(EXIT_FATAL);
  }, 180_000);

  it('bullmq: Redis paused (CLIENT PAUSE) for three job-lock durations, then resumed: every request answered, worker keeps running', async () => {
    const { redis, admin } = await ownRedis('outage');
    const transport = parseFleetConfig({ transport: { kind: 'bullmq', bullmq: { redisUrl: redis.url, prefix: uniqueName('outage'), lockDurationMs: 2_000 } } }).transport;
    // CLIENT PAUSE ends by itself; the admin connection issues it and is paused along with the rest.
    const r = await drill(transport, async () => void (await admin.call('CLIENT', 'PAUSE', '6000', 'ALL')), async () => {}, 6_000);
    expectSurvived('outage bullmq', r, 3_000);
  }, 180_000);

  it('bullmq: Redis restarted mid-load (SHUTDOWN SAVE, 3 s down, started on its dump): every request answered, worker keeps running', async () => {
    const { redis } = await ownRedis('restart');
    const transport = parseFleetConfig({ transport: { kind: 'bullmq', bullmq: { redisUrl: redis.url, prefix: uniqueName('restart'), lockDurationMs: 30_000 } } }).transport;
    let restarted: Promise<void> | undefined;
    const r = await drill(transport, async () => void (restarted = redis.restart(3_000)), async () => restarted, 0);
    expectSurvived('restart bullmq', r, 2_000);
    expect(r.unready, '/readyz while Redis was down').toContain('503 broker unreachable');
    // Jobs whose fetch the restart cut off come back at once: requests by the worker's reclaim
    // after its reconnect (not after their 30 s lock), results at the reply subscriber by its
    // 5 s stall checks (not BullMQ's 30-60 s).
    expect(r.lastAnswerMs).toBeLessThan(25_000);
  }, 240_000);

  it('bullmq: Redis out of memory (maxmemory under its use) for 8 s: nothing lost, fetching backs off instead of spinning, all served once memory is back', async () => {
    const { redis, admin } = await ownRedis('oom');
    process.env.NPU_FLEET_DEVICE = 'sim';
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'warn', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    const config = parseFleetConfig({
      transport: { kind: 'bullmq', bullmq: { redisUrl: redis.url, prefix: uniqueName('oom'), lockDurationMs: 10_000 } },
      devices: { count: 1, backend: 'sim' },
      models: ['mlp-classifier'],
      worker: { metricsPort: 0 },
    });
    const worker = await runWorker(config, 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
    cleanups.push(() => worker.stop());
    const producer = createProducer(config.transport, { log });
    cleanups.push(() => producer.close());
    const replyTo = uniqueName('oom-replies');
    const answers = new Set<string>();
    const sub = await producer.subscribeReplies(replyTo, (r) => void answers.add(r.id));
    cleanups.push(() => sub.close());
    const total = 2000;
    await producer.publish(Array.from({ length: total }, (_, i) => request(i, replyTo)));
    const used = Number(/used_memory:(\d+)/.exec(String(await admin.info('memory')))?.[1]);
    await admin.config('SET', 'maxmemory', String(used + 100_000));
    await new Promise((r) => setTimeout(r, 8_000));
    const duringOom = answers.size;
    const errorLines = lines.filter((l) => l.msg === 'bullmq worker error').length;
    const replyErrorLines = lines.filter((l) => l.msg === 'bullmq reply worker error').length;
    await admin.config('SET', 'maxmemory', '0');
    const liftedAt = Date.now();
    while (answers.size < total && Date.now() - liftedAt < 60_000) await new Promise((r) => setTimeout(r, 100));
    console.log(`[oom bullmq] answered ${duringOom} during 8 s out of memory, all ${answers.size}/${total} ${Date.now() - liftedAt} ms after; ${errorLines} 'bullmq worker error' and ${replyErrorLines} 'bullmq reply worker error' lines, worker ${worker.worker.status}`);
    expect(duringOom, 'Redis really refused the work').toBeLessThan(total);
    expect(answers.size).toBe(total);
    expect(worker.worker.status).toBe('running');
    // BullMQ alone retries a refused fetch at once, each failure an error event: without the
    // backoff and the rate limit this drill logged 30 lines, and another run 35,000 in 8 s.
    expect(errorLines).toBeLessThanOrEqual(3);
    expect(replyErrorLines).toBeLessThanOrEqual(3);
  }, 120_000);
});

