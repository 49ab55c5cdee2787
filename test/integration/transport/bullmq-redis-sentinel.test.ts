// BullMQ through Redis Sentinel (transport.bullmq.sentinel): 1 master + 1 sentinel of our own.
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BullmqSettingsSchema, type BullmqSettings } from '../../../src/contracts/fleet-config.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { uniqueName } from '../../helpers/unique-name.ts';
import { Inbox, makeRequest, outcomeFor, startWith } from './conformance-kit.ts';
import { startRedisWith, startSentinel } from './bullmq-redis-servers.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});

function settings(extra: Record<string, unknown>): BullmqSettings {
  return BullmqSettingsSchema.parse({ prefix: uniqueName('topo'), connectTimeoutMs: 3_000, ...extra });
}

describe('bullmq through Redis Sentinel', () => {
  let sentinelPort = 0;
  const master = uniqueName('master');
  beforeAll(async () => {
    const dir = tempDir('bullmq-redis-sentinel-');
    const { port } = await startRedisWith(dir, []);
    ({ port: sentinelPort } = await startSentinel(dir, master, port));
  }, 60_000);

  it('with transport.bullmq.sentinel { name, sentinels } a worker and a producer find the master and serve a request', async () => {
    const s = settings({ redisUrl: 'redis://sentinel', sentinel: { name: master, sentinels: [`127.0.0.1:${sentinelPort}`] } });
    const model = uniqueName('via-sentinel');
    const t = new BullmqTransport(s, { stalledIntervalMs: 500 });
    open.push(t);
    await t.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void t.settle(ds.map(outcomeFor)) });
    const producer = new BullmqProducer(s);
    open.push(producer);
    const result = await producer.request(makeRequest(model, 'via-sentinel', 0), { timeoutMs: 30_000 });
    expect(result.status).toBe('ok');
  });

  it('a master name the sentinels do not know fails the start naming transport.bullmq.sentinel', async () => {
    const t = new BullmqTransport(settings({ redisUrl: 'redis://sentinel', sentinel: { name: 'no-such-master', sentinels: [`127.0.0.1:${sentinelPort}`] } }));
    open.push(t);
    const err: unknown = await startWith(t, uniqueName('bad-master'), new Inbox()).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(FleetError);
    expect((err as FleetError).message).toMatch(/master no-such-master via the sentinels 127\.0\.0\.1:\d+ .*check transport\.bullmq\.sentinel/);
  });
});
