// A Sentinel failover while a worker holds jobs in flight (fetched, waiting locally, "on the
// device", results being written): the master is SIGKILLed or frozen (SIGSTOP, a hung host) and
// the sentinel promotes the replica. Every request must still get a result (a duplicate run is
// counted and bounded by what was in flight; none lost), and the same worker keeps serving through
// the promoted master without a restart. Real redis-server master + replica + sentinel, started
// here (bullmq-redis-failover.test.ts covers a failover with nothing in flight).
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { BullmqSettingsSchema } from '../../../src/contracts/fleet-config.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { uniqueName } from '../../helpers/unique-name.ts';
import { untilProbe } from '../../helpers/until.ts';
import { requestAll, startBatchingWorker } from './batching-worker.ts';
import { makeRequest } from './conformance-kit.ts';
import { startRedisWith, startSentinel } from './bullmq-redis-servers.ts';

const cleanup: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await Promise.resolve(c()).catch(() => undefined);
});


const N = 400;
const DEVICE_MS = 200;
const BATCH = 8;
const LOCK_MS = 4_000;

async function drill(how: 'SIGKILL' | 'SIGSTOP'): Promise<void> {
  const dir = tempDir('bullmq-failover-inflight-');
  const master = uniqueName('master');
  const { port: masterPort, proc: masterProc } = await startRedisWith(dir, []);
  const { port: replicaPort } = await startRedisWith(dir, ['--replicaof', '127.0.0.1', String(masterPort)]);
  const { port: sentinelPort } = await startSentinel(dir, master, masterPort, `sentinel down-after-milliseconds ${master} 1000\nsentinel failover-timeout ${master} 5000\n`);
  const masterPid = masterProc.child.pid as number;
  // A frozen master must not outlive the test (its sentinel and replica are stopped by afterAll).
  cleanup.push(() => {
    try {
      process.kill(masterPid, 'SIGCONT');
    } catch {
      // Already gone (SIGKILL).
    }
  });
  const sentinel = new Redis(sentinelPort, '127.0.0.1');
  cleanup.push(() => sentinel.disconnect());
  await untilProbe('sentinel sees the replica', async () => ((await sentinel.call('SENTINEL', 'REPLICAS', master)) as unknown[]).length > 0, 30_000);

  const s = BullmqSettingsSchema.parse({
    redisUrl: 'redis://sentinel',
    sentinel: { name: master, sentinels: [`127.0.0.1:${sentinelPort}`] },
    prefix: uniqueName('failinfl'),
    connectTimeoutMs: 5_000,
    lockDurationMs: LOCK_MS,
    prefetch: 16,
  });
  const model = uniqueName('failinfl');
  const { device, producer } = await startBatchingWorker(s, { model, batch: BATCH, deviceMs: DEVICE_MS, cleanup });
  const served = device.served;

  const answers = requestAll(producer, model, N, 90_000);
  // Every request is on the replica too (replication is asynchronous: one lost in the switch was never the worker's).
  const onReplica = new Redis(replicaPort, '127.0.0.1');
  cleanup.push(() => onReplica.disconnect());
  await untilProbe('every request replicated', async () => (await onReplica.exists(...Array.from({ length: N }, (_, i) => `${s.prefix}:${model}.requests:r${i}`))) === N, 30_000);
  await untilProbe('the worker is part way', () => Promise.resolve([...served.values()].length >= 3 * BATCH), 30_000);
  const servedAtSwitch = served.size;
  const inFlight = device.held();
  const switchAt = Date.now();
  process.kill(masterPid, how);
  await untilProbe('the replica is the master', async () => ((await sentinel.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', master)) as string[])[1] === String(replicaPort), 60_000);
  const promotedAt = Date.now();

  const deadline = Date.now() + 60_000;
  const outcomes = await Promise.race([answers, new Promise<undefined>((r) => setTimeout(() => r(undefined), deadline - Date.now()))]);
  const unserved = Array.from({ length: N }, (_, i) => `r${i}`).filter((id) => !served.has(id));
  const duplicates = [...served.values()].reduce((n, c) => n + c - 1, 0);
  const report = `${how}: served ${served.size} of ${N} (${servedAtSwitch} before the switch, ${inFlight} held locally at it), duplicates ${duplicates}, promoted ${promotedAt - switchAt} ms after; ` +
    `answers ${outcomes === undefined ? 'not all within 60 s' : `${outcomes.filter((o) => o === 'ok').length} ok`} ${Date.now() - promotedAt} ms after the promotion; unserved ${unserved.slice(0, 5).join(',')}`;
  console.log(`[failover-inflight] ${report}`);
  if (outcomes === undefined) {
    // Who is on the promoted master, and blocked on what: which connection did not follow.
    const promoted = new Redis(replicaPort, '127.0.0.1');
    console.log(`[failover-inflight] promoted master's clients:\n${String(await promoted.call('CLIENT', 'LIST'))}`);
    promoted.disconnect();
  }
  expect(outcomes, report).toBeDefined();
  expect(outcomes?.filter((o) => o !== 'ok'), report).toEqual([]);
  // A duplicate is a job whose completion the promoted master never got: at most what was held then, and the batches after.
  expect(duplicates, report).toBeLessThanOrEqual(2 * (s.prefetch + BATCH));

  // The same worker serves the next request through the new master, for the same producer.
  const after = await producer.request(makeRequest(model, 'after', 0), { timeoutMs: 30_000 });
  expect(after.status, report).toBe('ok');
}

describe('bullmq through a Sentinel failover with jobs in flight', () => {
  it('master SIGKILLed: every request answered, duplicates bounded, the worker serves on the promoted replica', () => drill('SIGKILL'), 180_000);
  it('master frozen (SIGSTOP) for good: every request answered, duplicates bounded, the worker serves on the promoted replica', () => drill('SIGSTOP'), 180_000);
});
