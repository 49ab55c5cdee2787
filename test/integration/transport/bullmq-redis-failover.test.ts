// A Sentinel failover under a running worker: the master moves to the replica, and the worker and
// the producer (transport.bullmq.sentinel) follow it and keep serving.
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { BullmqSettingsSchema } from '../../../src/contracts/fleet-config.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { uniqueName } from '../../helpers/unique-name.ts';
import { untilProbe } from '../../helpers/until.ts';
import { makeRequest, outcomeFor } from './conformance-kit.ts';
import { startRedisWith, startSentinel } from './bullmq-redis-servers.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});


describe('bullmq through a Sentinel failover', () => {
  it('a worker and a producer follow the master to the promoted replica and keep serving', async () => {
    const dir = tempDir('bullmq-redis-failover-');
    const master = uniqueName('master');
    const { port: masterPort } = await startRedisWith(dir, []);
    const { port: replicaPort } = await startRedisWith(dir, ['--replicaof', '127.0.0.1', String(masterPort)]);
    const { port: sentinelPort } = await startSentinel(dir, master, masterPort, `sentinel down-after-milliseconds ${master} 1000\nsentinel failover-timeout ${master} 5000\n`);
    const sentinel = new Redis(sentinelPort, '127.0.0.1');
    try {
      // The sentinel learns of the replica from the master's INFO.
      await untilProbe('sentinel sees the replica', async () => ((await sentinel.call('SENTINEL', 'REPLICAS', master)) as unknown[]).length > 0, 30_000);

      const s = BullmqSettingsSchema.parse({ redisUrl: 'redis://sentinel', sentinel: { name: master, sentinels: [`127.0.0.1:${sentinelPort}`] }, prefix: uniqueName('failover'), connectTimeoutMs: 5_000 });
      const model = uniqueName('failover');
      const t = new BullmqTransport(s, { stalledIntervalMs: 500 });
      open.push(t);
      await t.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void t.settle(ds.map(outcomeFor)) });
      const producer = new BullmqProducer(s);
      open.push(producer);
      expect((await producer.request(makeRequest(model, 'before', 0), { timeoutMs: 30_000 })).status).toBe('ok');

      await sentinel.call('SENTINEL', 'FAILOVER', master);
      await untilProbe('the replica is the master', async () => ((await sentinel.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', master)) as string[])[1] === String(replicaPort), 30_000);

      // And the old master has been turned into its replica: from here a write there is refused.
      const old = new Redis(masterPort, '127.0.0.1');
      try {
        await untilProbe('the old master is a replica', async () => ((await old.call('ROLE')) as string[])[0] === 'slave', 30_000);
      } finally {
        old.disconnect();
      }
      const startedAt = Date.now();
      const after = await producer.request(makeRequest(model, 'after', 0), { timeoutMs: 30_000 });
      console.log(`[failover] answered ${Date.now() - startedAt} ms after the switch`);
      expect(after.status).toBe('ok');
      // Served through the new master: the request's job is there.
      const promoted = new Redis(replicaPort, '127.0.0.1');
      try {
        expect(await promoted.exists(`${s.prefix}:${model}.requests:after`)).toBe(1);
      } finally {
        promoted.disconnect();
      }
    } finally {
      sentinel.disconnect();
    }
  }, 120_000);
});
