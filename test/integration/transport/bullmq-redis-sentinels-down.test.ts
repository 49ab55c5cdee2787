// Redis Sentinel laid out as in production, three sentinels (quorum 2) over a master and a replica,
// with one of the sentinels themselves killed (SIGKILL: connections refused at once), frozen
// (SIGSTOP: its port still accepts, nothing answers, as on a hung host or paused VM) or silent
// (frozen with its accept queue full: a dial gets no SYN-ACK and no RST, as a host whose packets are
// dropped; connect() itself hangs). The worker and the producer must start and serve against the
// others, follow a failover the other two carry out, and their +switch-master subscribers to the
// sentinel that is away must not pile up connections, timers or errors.
// Real redis-server and redis-sentinel processes, started here.
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BullmqSettingsSchema, type BullmqSettings } from '../../../src/contracts/fleet-config.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { dialWithin, fillAcceptQueue, pendingDials } from '../../helpers/fill-accept-queue.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { uniqueName } from '../../helpers/unique-name.ts';
import { untilProbe } from '../../helpers/until.ts';
import { requestAll, startBatchingWorker } from './batching-worker.ts';
import { makeRequest, outcomeFor } from './conformance-kit.ts';
import { signalServer, startRedisWith, startSentinel, type RedisProcess } from './bullmq-redis-servers.ts';

const cleanup: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await Promise.resolve(c()).catch(() => undefined);
});

// An unhandled rejection from a subscriber to a sentinel that is away fails the file.
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
beforeAll(() => void process.on('unhandledRejection', onUnhandled));
afterAll(() => void process.off('unhandledRejection', onUnhandled));


const CONNECT_TIMEOUT_MS = 5_000;
const START_BOUND_MS = 2_500;
const SWITCH_MASTER_CLIENT = 'npu-fleet-switch-master';

interface Layout {
  readonly master: string;
  readonly masterServer: RedisProcess;
  readonly replicaPort: number;
  readonly sentinels: RedisProcess[];
  settings(prefix: string, extra?: Record<string, unknown>): BullmqSettings;
  /** A plain client to sentinel i (for probes; not the product's). */
  ask(i: number): Redis;
}

/** Master + replica + three sentinels (quorum 2, down-after 1000 ms), ready once each sentinel knows the replica and the two others. */
async function threeSentinels(): Promise<Layout> {
  const dir = tempDir('bullmq-sentinels-down-');
  const master = uniqueName('master');
  const masterServer = await startRedisWith(dir, []);
  const { port: replicaPort } = await startRedisWith(dir, ['--replicaof', '127.0.0.1', String(masterServer.port)]);
  const conf = `sentinel down-after-milliseconds ${master} 1000\nsentinel failover-timeout ${master} 5000\n`;
  const sentinels: RedisProcess[] = [];
  for (let i = 0; i < 3; i++) sentinels.push(await startSentinel(dir, master, masterServer.port, conf, 2));
  // Whatever a test freezes is thawed, so the afterAll stop is a plain one (and a SIGKILLed master stays dead).
  cleanup.push(() => {
    for (const s of [masterServer, ...sentinels]) signalServer(s, 'SIGCONT');
  });
  const clients = new Map<number, Redis>();
  const ask = (i: number): Redis => {
    let c = clients.get(i);
    if (c === undefined) {
      c = new Redis(sentinels[i]!.port, '127.0.0.1', { maxRetriesPerRequest: 1, commandTimeout: 1_000, lazyConnect: false });
      c.on('error', () => undefined);
      clients.set(i, c);
    }
    return c;
  };
  cleanup.push(() => {
    for (const c of clients.values()) c.disconnect();
  });
  for (let i = 0; i < 3; i++) {
    await untilProbe(
      `sentinel ${i} sees the replica and the other two`,
      async () =>
        ((await ask(i).call('SENTINEL', 'REPLICAS', master)) as unknown[]).length === 1 &&
        ((await ask(i).call('SENTINEL', 'SENTINELS', master)) as unknown[]).length === 2,
      30_000,
    );
  }
  return {
    master,
    masterServer,
    replicaPort,
    sentinels,
    ask,
    settings: (prefix, extra = {}) =>
      BullmqSettingsSchema.parse({
        redisUrl: 'redis://sentinel',
        sentinel: { name: master, sentinels: sentinels.map((s) => `127.0.0.1:${s.port}`) },
        prefix: uniqueName(prefix),
        connectTimeoutMs: CONNECT_TIMEOUT_MS,
        ...extra,
      }),
  };
}

type Away = 'dead' | 'frozen' | 'silent';

/**
 * Sends sentinel i away. Silent: frozen, then its accept queue filled, so a new dial hangs (shown
 * here: no connect and no error within 2 s); the connections made before it went silent stay open
 * and unanswered, as they would to a host that drops packets until TCP gives them up.
 */
async function sendAway(layout: Layout, i: number, how: Away): Promise<void> {
  const sentinel = layout.sentinels[i]!;
  signalServer(sentinel, how === 'dead' ? 'SIGKILL' : 'SIGSTOP');
  if (how !== 'silent') return;
  const queue = await fillAcceptQueue(sentinel.port);
  cleanup.push(() => queue.release());
  expect(await dialWithin(sentinel.port, 2_000), `sentinel ${i} after ${queue.connections} connections filled its accept queue`).toBe('no answer');
}

/** The fleet's +switch-master subscribers connected to sentinel i now. */
async function subscribersOn(layout: Layout, i: number): Promise<number> {
  const list = String(await layout.ask(i).call('CLIENT', 'LIST'));
  return list.split('\n').filter((line) => line.includes(`name=${SWITCH_MASTER_CLIENT} `)).length;
}

/**
 * Samples the process's active handles, the subscribers on the live sentinels and the dials
 * waiting on the one away (a silent one: TCP SYN_SENT) for `forMs` while sentinel `away` stays
 * away, serving a request midway: none may grow (a reconnect loop that leaked a socket or a timer
 * per attempt would).
 */
async function steadyWhileAway(layout: Layout, away: number, producer: BullmqProducer, model: string, forMs: number): Promise<string> {
  const live = [0, 1, 2].filter((i) => i !== away);
  const handles: number[] = [];
  const dials: number[] = [];
  const subscribers: number[][] = [];
  const started = Date.now();
  let served = false;
  while (Date.now() - started < forMs) {
    handles.push(process.getActiveResourcesInfo().length);
    dials.push(pendingDials(layout.sentinels[away]!.port));
    subscribers.push(await Promise.all(live.map((i) => subscribersOn(layout, i))));
    if (!served && Date.now() - started > forMs / 2) {
      expect((await producer.request(makeRequest(model, 'midway', 0), { timeoutMs: 10_000 })).status).toBe('ok');
      served = true;
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  const figures =
    `handles ${handles.join(',')}; dials waiting on the one away ${dials.join(',')}; ` +
    `subscribers on the live sentinels ${subscribers.map((s) => s.join('+')).join(',')}`;
  // A few sockets and timers come and go (BullMQ's blocking fetches, the reconnect attempt of the moment).
  const firstThird = <T>(xs: T[]): T[] => xs.slice(0, Math.ceil(xs.length / 3));
  const lastThird = <T>(xs: T[]): T[] => xs.slice(-Math.ceil(xs.length / 3));
  expect(Math.min(...lastThird(handles)), figures).toBeLessThanOrEqual(Math.max(...firstThird(handles)) + 3);
  expect(Math.max(...lastThird(dials)), figures).toBeLessThanOrEqual(Math.max(...firstThird(dials)));
  expect(new Set(subscribers.map((s) => s.join('+'))).size, figures).toBe(1);
  expect(subscribers[0]!.every((n) => n > 0), figures).toBe(true);
  return figures;
}

/**
 * Starts the worker and sends the producer's first request at the same time, so that each of them
 * dials the sentinels afresh (a sentinel asked last is remembered per process): the worker's start
 * and the first answer, each from the same instant.
 */
async function startServing(layout: Layout, prefix: string): Promise<{ t: BullmqTransport; producer: BullmqProducer; model: string; workerStartMs: number; firstAnswerMs: number }> {
  const s = layout.settings(prefix);
  const model = uniqueName(prefix);
  const t = new BullmqTransport(s, { stalledIntervalMs: 500 });
  cleanup.push(() => t.close());
  const producer = new BullmqProducer(s, { clientId: uniqueName(prefix) });
  cleanup.push(() => producer.close());
  const startedAt = Date.now();
  const [workerStartMs, firstAnswerMs] = await Promise.all([
    t.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void t.settle(ds.map(outcomeFor)) }).then(() => Date.now() - startedAt),
    producer.request(makeRequest(model, 'first', 0), { timeoutMs: 30_000 }).then((r) => (expect(r.status).toBe('ok'), Date.now() - startedAt)),
  ]);
  return { t, producer, model, workerStartMs, firstAnswerMs };
}

describe('bullmq through three sentinels, one of them away', () => {
  // Frozen bound: one wait on the frozen sentinel (1 s, SENTINEL_ANSWER_MS in redis-connection.ts)
  // for the first connections (the worker's shared one and the producer's, dialled together); the
  // later ones (the model's worker, its blocking duplicate, the reply workers') ask it last. Without a
  // limit the start failed after connectTimeoutMs; with one wait per connection it took 4.1 s. The subscriber to a dead sentinel is between reconnect attempts and
  // those to a frozen one never got an answer: either way their timers and sockets must be gone after close.
  // Silent: the dial to it hangs where the frozen one's completes, and the wait is the same one
  // sentinel answer (ioredis starts that limit when the question is queued, connected or not). Its
  // +switch-master subscribers' dials give up after ioredis's connectTimeout (10 s) and start
  // again: 14 s away takes in one such round.
  it.each([
    { state: 'dead' as const, awayMs: 8_000, boundMs: CONNECT_TIMEOUT_MS },
    { state: 'frozen' as const, awayMs: 6_000, boundMs: START_BOUND_MS },
    { state: 'silent' as const, awayMs: 14_000, boundMs: START_BOUND_MS },
  ])('the first-listed sentinel $state at start: the worker and the producer start and answer within $boundMs ms through the other two; nothing piles up while it stays away, nor after close', async ({ state, awayMs, boundMs }) => {
    const layout = await threeSentinels();
    await sendAway(layout, 0, state);
    const baseline = process.getActiveResourcesInfo().length;
    const { t, producer, model, workerStartMs, firstAnswerMs } = await startServing(layout, `sentinel-${state}`);
    const figures = await steadyWhileAway(layout, 0, producer, model, awayMs);
    const closingAt = Date.now();
    await producer.close();
    await t.close();
    const closeMs = Date.now() - closingAt;
    console.log(`[sentinels-down] ${state} first sentinel: worker started in ${workerStartMs} ms, first answer in ${firstAnswerMs} ms, closed in ${closeMs} ms; ${figures}`);
    expect(workerStartMs).toBeLessThan(boundMs);
    expect(firstAnswerMs).toBeLessThan(boundMs);
    // Each close is bounded by connectTimeoutMs; a subscriber mid-dial must not hold either up.
    expect(closeMs).toBeLessThan(CONNECT_TIMEOUT_MS);
    await untilProbe('no subscriber left on the live sentinels', async () => (await subscribersOn(layout, 1)) + (await subscribersOn(layout, 2)) === 0, 5_000);
    await untilProbe('no dial left waiting on the one away', () => Promise.resolve(pendingDials(layout.sentinels[0]!.port) === 0), 5_000);
    await untilProbe('the handles back to where they were', () => Promise.resolve(process.getActiveResourcesInfo().length <= baseline), 5_000);
    expect(unhandled).toEqual([]);
  }, 120_000);

  // The master SIGKILLed: its connections close and re-dial through the sentinels, the one away
  // asked first. The master frozen (SIGSTOP) for good: its connections see no close, only the
  // +switch-master of the two live sentinels moves them.
  it.each([
    { sentinel: 'frozen' as const, how: 'SIGKILL' as const },
    { sentinel: 'frozen' as const, how: 'SIGSTOP' as const },
    { sentinel: 'silent' as const, how: 'SIGKILL' as const },
    { sentinel: 'silent' as const, how: 'SIGSTOP' as const },
  ])('a sentinel $sentinel while serving, then the master $how: the other two promote the replica, the worker and the producer follow, every request answered', ({ sentinel, how }) =>
    failoverWithASentinelAway(sentinel, how), 180_000);
});

async function failoverWithASentinelAway(sentinel: Exclude<Away, 'dead'>, how: 'SIGKILL' | 'SIGSTOP'): Promise<void> {
  const N = 300;
  const BATCH = 8;
  const layout = await threeSentinels();
  const s = layout.settings('sentinel-failover', { lockDurationMs: 4_000, prefetch: 16 });
  const model = uniqueName('sentinel-failover');
  const { device, producer } = await startBatchingWorker(s, { model, batch: BATCH, deviceMs: 200, cleanup });
  const served = device.served;

  const answers = requestAll(producer, model, N, 90_000);
  // Every request is on the replica too (replication is asynchronous: one lost in the switch was never the worker's).
  const onReplica = new Redis(layout.replicaPort, '127.0.0.1');
  cleanup.push(() => onReplica.disconnect());
  await untilProbe('every request replicated', async () => (await onReplica.exists(...Array.from({ length: N }, (_, i) => `${s.prefix}:${model}.requests:r${i}`))) === N, 30_000);
  await untilProbe('the worker is part way', () => Promise.resolve(served.size >= 3 * BATCH), 30_000);

  // The middle one: ioredis asks the sentinels in turn from the one after the last that answered,
  // so a connection re-dialling after the master's death asks this one first.
  await sendAway(layout, 1, sentinel);
  const servedAtSwitch = served.size;
  const heldAtSwitch = device.held();
  const switchAt = Date.now();
  signalServer(layout.masterServer, how);
  await untilProbe('the replica is the master', async () => ((await layout.ask(0).call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', layout.master)) as string[])[1] === String(layout.replicaPort), 60_000);
  const promotedAt = Date.now();

  const outcomes = await Promise.race([answers, new Promise<undefined>((r) => setTimeout(() => r(undefined), 60_000))]);
  const duplicates = [...served.values()].reduce((n, c) => n + c - 1, 0);
  const unserved = Array.from({ length: N }, (_, i) => `r${i}`).filter((id) => !served.has(id));
  const report =
    `served ${served.size} of ${N} (${servedAtSwitch} before the switch, ${heldAtSwitch} held locally), duplicates ${duplicates}, promoted ${promotedAt - switchAt} ms after the ${how}; ` +
    `answers ${outcomes === undefined ? 'not all within 60 s' : `${outcomes.filter((o) => o === 'ok').length} ok`} ${Date.now() - promotedAt} ms after the promotion; unserved ${unserved.slice(0, 5).join(',')}`;
  console.log(`[sentinels-down] ${sentinel} sentinel + master ${how}: ${report}`);
  if (outcomes === undefined) {
    const promoted = new Redis(layout.replicaPort, '127.0.0.1');
    console.log(`[sentinels-down] promoted master's clients:\n${String(await promoted.call('CLIENT', 'LIST'))}`);
    promoted.disconnect();
  }
  expect(outcomes, report).toBeDefined();
  expect(outcomes?.filter((o) => o !== 'ok'), report).toEqual([]);
  expect(unserved, report).toEqual([]);
  // A duplicate is a job whose completion the promoted master never got: at most what was held then, and the batches after.
  expect(duplicates, report).toBeLessThanOrEqual(2 * (s.prefetch + BATCH));

  const after = await producer.request(makeRequest(model, 'after', 0), { timeoutMs: 30_000 });
  expect(after.status, report).toBe('ok');
  expect(unhandled).toEqual([]);
}
