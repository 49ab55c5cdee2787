// The BullMQ transport while its Redis is away: close() stays bounded (a worker SIGTERMed during
// an outage must exit within its drain bound) and the log does not flood. Each close test runs a
// redis-server of its own and freezes it (SIGSTOP: connections stay open, nothing answers) or
// kills it; the shared test Redis is never touched.
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import type { TransportLogger } from '../../../src/transport/kafka/kafka-client.ts';
import { findRedisServer, redisInfo } from '../../helpers/local-redis-service.ts';
import { freePort, startServiceProcess, waitUntil, type ServiceProcess } from '../../helpers/service-process.ts';
import { uniqueName } from '../../helpers/services.ts';
import { bullmqSettings } from './bullmq-harness.ts';
import { Inbox, makeRequest, outcomeFor, startWith } from './conformance-kit.ts';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  // Bounded: a close that hangs (the failure looked for) must not hang the clean-up too.
  for (const c of cleanups.splice(0).reverse()) await Promise.race([c().catch(() => undefined), new Promise((r) => setTimeout(r, 5_000))]);
});

/** A redis-server of the test's own, which it can freeze (SIGSTOP) or kill, and bring back. */
async function ownRedis(): Promise<{ url: string; freeze(): void; kill(): void; revive(): Promise<void> }> {
  const binary = findRedisServer();
  if (binary === undefined) throw new Error('redis-server is not on PATH (apt-get install redis-server)');
  const dir = mkdtempSync(join(tmpdir(), 'npu-fleet-bullmq-outage-'));
  const port = await freePort();
  const url = `redis://127.0.0.1:${port}`;
  const launch = async (): Promise<ServiceProcess> => {
    const proc = startServiceProcess(
      'redis-server',
      binary,
      ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', '--maxmemory-policy', 'noeviction'],
      { cwd: dir, logPath: join(dir, 'redis.log') },
    );
    cleanups.push(async () => {
      signal(proc, 'SIGCONT');
      await proc.stop(500);
    });
    await waitUntil(`redis-server on port ${port}`, proc, async () => (await redisInfo(url, 500), true), 15_000);
    return proc;
  };
  let proc = await launch();
  let frozen = false;
  return {
    url,
    freeze: () => {
      frozen = true;
      signal(proc, 'SIGSTOP');
    },
    kill: () => signal(proc, 'SIGKILL'),
    revive: async () => {
      if (frozen) signal(proc, 'SIGCONT');
      else {
        await proc.exited;
        proc = await launch();
      }
      frozen = false;
    },
  };
}

function signal(proc: ServiceProcess, sig: NodeJS.Signals): void {
  try {
    process.kill(proc.child.pid ?? 0, sig);
  } catch {
    // already gone
  }
}

/** The names of the client connections Redis has now, but for the asking one. */
async function otherClients(url: string): Promise<string[]> {
  const admin = new Redis(url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
  try {
    await admin.client('SETNAME', 'outage-test-admin');
    const list = String(await admin.client('LIST'));
    return list
      .split('\n')
      .filter((l) => l.trim() !== '' && !l.includes('name=outage-test-admin '))
      .map((l) => /name=(\S*)/.exec(l)?.[1] ?? l);
  } finally {
    admin.disconnect();
  }
}

const CONNECT_TIMEOUT_MS = 1_000;

/**
 * close() with Redis frozen or killed after `held` jobs were delivered: how long it took (or
 * 'hung'), and which connections reached Redis once it was back (none should: a connection left
 * reconnecting keeps the process alive). `sweeps` false: no stall-reaper sweep in flight when
 * Redis goes (between two sweeps).
 */
async function closeWithRedisAway(how: 'freeze' | 'kill', held: number, sweeps: boolean): Promise<{ tookMs: number | 'hung'; leftOpen: string[] }> {
  const redis = await ownRedis();
  const settings = bullmqSettings({ redisUrl: redis.url, connectTimeoutMs: CONNECT_TIMEOUT_MS });
  const model = uniqueName(`outage-${how}`);
  const producer = new BullmqProducer(settings);
  cleanups.push(() => producer.close());
  if (held > 0) await producer.publish(Array.from({ length: held }, (_, i) => makeRequest(model, `held-${i}`, 0)));
  await producer.close();
  const t = new BullmqTransport(settings, { stalledIntervalMs: 500, reaperIntervalMs: sweeps ? 10_000 : 0 });
  cleanups.push(() => t.close());
  const inbox = new Inbox();
  await startWith(t, model, inbox);
  if (held > 0) await inbox.waitFor(held, 10_000);
  if (how === 'freeze') redis.freeze();
  else redis.kill();
  const startedAt = Date.now();
  const closed = await Promise.race([t.close().then(() => 'closed'), new Promise((r) => setTimeout(() => r('hung'), 15_000))]);
  const tookMs = closed === 'hung' ? 'hung' : Date.now() - startedAt;
  await redis.revive();
  // ioredis's reconnect delay is 50 ms more per attempt: a few attempts fit in this.
  await new Promise((r) => setTimeout(r, 2_500));
  return { tookMs, leftOpen: await otherClients(redis.url) };
}

// The graceful close waits for Redis at its first step that needs it; past connectTimeoutMs the
// transport closes as a crash does (abort), and then dropping the sweeps and the force close of
// the BullMQ workers must not wait for Redis either (1 s each at most, STOP_WAIT_MS).
const CLOSE_BOUND_MS = CONNECT_TIMEOUT_MS + 3_000;

describe('bullmq transport close() with its Redis away', () => {
  for (const how of ['freeze', 'kill'] as const) {
    for (const [held, sweeps] of [[0, true], [0, false], [2, true]] as const) {
      it(`returns within connectTimeoutMs + 3 s when Redis was ${how === 'freeze' ? 'frozen (SIGSTOP)' : 'killed'} holding ${held} jobs${sweeps ? '' : ', no sweep in flight'}`, async () => {
        const { tookMs, leftOpen } = await closeWithRedisAway(how, held, sweeps);
        expect(tookMs).not.toBe('hung');
        expect(tookMs).toBeLessThan(CLOSE_BOUND_MS);
        expect(leftOpen).toEqual([]);
      }, 40_000);
    }
  }
});

/** A logger keeping the warn lines: message, queue and heldBack. */
function warnLines(): { logger: TransportLogger; lines: Array<{ msg: string; queue: unknown; heldBack: unknown }> } {
  const lines: Array<{ msg: string; queue: unknown; heldBack: unknown }> = [];
  const logger: TransportLogger = {
    warn: (o, msg) => lines.push({ msg, queue: (o as { queue?: unknown }).queue, heldBack: (o as { heldBack?: unknown }).heldBack }),
    info: () => undefined,
    error: () => undefined,
    debug: () => undefined,
  };
  return { logger, lines };
}

describe('a process whose bullmq transport closed with its Redis away', () => {
  it('exits by itself: nothing of the transport is left running', async () => {
    const redis = await ownRedis();
    const settings = bullmqSettings({ redisUrl: redis.url, connectTimeoutMs: CONNECT_TIMEOUT_MS });
    const fixture = join(dirname(fileURLToPath(import.meta.url)), 'fixtures/close-outage-worker.ts');
    const child = spawn(process.execPath, ['--import', 'tsx', fixture, JSON.stringify(settings), uniqueName('outage-exit')], { stdio: ['ignore', 'pipe', 'inherit'] });
    cleanups.push(async () => child.kill('SIGKILL'));
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    let out = '';
    const saw = (what: RegExp) =>
      new Promise<string>((resolve, reject) => {
        const look = (): void => {
          const m = what.exec(out);
          if (m !== null) resolve(m[0]);
        };
        child.stdout.on('data', (b: Buffer) => ((out += b.toString()), look()));
        void exited.then(() => reject(new Error(`the process exited first; its output: ${out}`)));
        look();
      });
    await saw(/ready/);
    redis.kill();
    child.kill('SIGUSR2');
    const closedMs = Number((await saw(/closed \d+/)).split(' ')[1]);
    expect(closedMs).toBeLessThan(CLOSE_BOUND_MS);
    const after = await Promise.race([exited.then(() => 'exited'), new Promise((r) => setTimeout(() => r('still running'), 10_000))]);
    expect(after).toBe('exited');
  }, 60_000);
});

describe('bullmq transport log with its Redis away', () => {
  it('logs "bullmq queue error" of its reply queues one line per 10 s, carrying the count held back', async () => {
    const redis = await ownRedis();
    const settings = bullmqSettings({ redisUrl: redis.url });
    const model = uniqueName('outage-log');
    const replyQueues = [`${model}.out-a`, `${model}.out-b`];
    const producer = new BullmqProducer(settings);
    cleanups.push(() => producer.close());
    await producer.publish(replyQueues.map((replyTo, i) => makeRequest(model, `log-${i}`, 0, { replyTo })));
    await producer.close();
    const { logger, lines } = warnLines();
    const t = new BullmqTransport(settings, { logger });
    cleanups.push(() => t.close());
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    // Settled: each reply queue is now a Queue on the transport's shared connection.
    await t.settle((await inbox.waitFor(2, 10_000)).map(outcomeFor));
    redis.kill();
    // ioredis's reconnect delay grows by 50 ms an attempt: about 20 errors in this, on each queue.
    await new Promise((r) => setTimeout(r, 11_500));
    const queueLines = lines.filter((l) => l.msg === 'bullmq queue error' && replyQueues.includes(String(l.queue)));
    expect(queueLines).toHaveLength(2);
    expect(queueLines[0]?.heldBack).toBe(0);
    // Both queues' errors of the 10 s between the lines, but for the one logged.
    expect(queueLines[1]?.heldBack).toBeGreaterThanOrEqual(20);
  }, 40_000);
});
