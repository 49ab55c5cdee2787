// BullMQ against a Redis Cluster node: not supported, so refused at start, naming the reason.
import { Redis } from 'ioredis';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BullmqSettingsSchema, type BullmqSettings } from '../../../src/contracts/fleet-config.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { uniqueName } from '../../helpers/unique-name.ts';
import { Inbox, makeRequest, startWith } from './conformance-kit.ts';
import { startRedisWith } from './bullmq-redis-servers.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});

function settings(extra: Record<string, unknown>): BullmqSettings {
  return BullmqSettingsSchema.parse({ prefix: uniqueName('topo'), connectTimeoutMs: 3_000, ...extra });
}

describe('bullmq against a Redis Cluster node', () => {
  let port = 0;
  beforeAll(async () => {
    const dir = tempDir('bullmq-redis-cluster-');
    ({ port } = await startRedisWith(dir, ['--cluster-enabled', 'yes', '--cluster-config-file', `${dir}/nodes.conf`]));
    // One node owning every slot: a complete (if tiny) cluster.
    const admin = new Redis(port, '127.0.0.1');
    try {
      await admin.call('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
    } finally {
      admin.disconnect();
    }
  }, 60_000);

  it('is refused at the worker start and the first publish, saying Cluster is not supported and what is', async () => {
    const s = settings({ redisUrl: `redis://127.0.0.1:${port}` });
    const t = new BullmqTransport(s);
    open.push(t);
    const startErr: unknown = await startWith(t, uniqueName('on-cluster'), new Inbox()).then(() => undefined, (e: unknown) => e);
    const producer = new BullmqProducer(s);
    open.push(producer);
    const publishErr: unknown = await producer.publish(makeRequest(uniqueName('on-cluster'), 'x', 0)).then(() => undefined, (e: unknown) => e);
    for (const err of [startErr, publishErr]) {
      expect(err).toBeInstanceOf(FleetError);
      expect((err as FleetError).code).toBe('INVALID_CONFIG');
      expect((err as FleetError).message).toMatch(/Redis at 127\.0\.0\.1:\d+ is a Redis Cluster node \(cluster_enabled:1\); npu-fleet does not support Redis Cluster: point transport\.bullmq\.redisUrl at a standalone Redis or use transport\.bullmq\.sentinel/);
    }
  });
});
