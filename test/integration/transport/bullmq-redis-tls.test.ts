// BullMQ to a Redis that speaks TLS only (rediss://), its certificate signed by a private CA.
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BullmqSettingsSchema, type BullmqSettings } from '../../../src/contracts/fleet-config.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { freePort } from '../../helpers/service-process.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { makeTestTls } from '../../helpers/test-tls.ts';
import { uniqueName } from '../../helpers/unique-name.ts';
import { Inbox, makeRequest, outcomeFor, startWith } from './conformance-kit.ts';
import { startRedisWith } from './bullmq-redis-servers.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});

let port = 0;
let caFile = '';
beforeAll(async () => {
  const dir = tempDir('bullmq-redis-tls-');
  const tls = makeTestTls(join(dir, 'tls'), ['127.0.0.1', 'localhost']);
  caFile = tls.caFile;
  const tlsPort = await freePort();
  // TLS only: --port 0 turns the plain listener off.
  ({ port } = await startRedisWith(dir, [
    '--port', '0',
    '--tls-port', String(tlsPort),
    '--tls-cert-file', join(dir, 'tls', 'broker.crt'),
    '--tls-key-file', join(dir, 'tls', 'broker.key'),
    '--tls-ca-cert-file', tls.caFile,
    '--tls-auth-clients', 'no',
  ], tlsPort));
}, 60_000);

function settings(extra: Record<string, unknown> = {}): BullmqSettings {
  return BullmqSettingsSchema.parse({ redisUrl: `rediss://127.0.0.1:${port}`, prefix: uniqueName('tls'), connectTimeoutMs: 3_000, ...extra });
}

describe('bullmq over TLS (rediss://)', () => {
  it('with the CA of the server (transport.bullmq.tls.caFile) a worker and a producer serve a request', async () => {
    const s = settings({ tls: { caFile } });
    const model = uniqueName('over-tls');
    const t = new BullmqTransport(s, { stalledIntervalMs: 500 });
    open.push(t);
    await t.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void t.settle(ds.map(outcomeFor)) });
    const producer = new BullmqProducer(s);
    open.push(producer);
    const result = await producer.request(makeRequest(model, 'over-tls', 0), { timeoutMs: 30_000 });
    expect(result.status).toBe('ok');
  });

  it('a server certificate the system CAs do not vouch for fails the start naming transport.bullmq.tls', async () => {
    const t = new BullmqTransport(settings());
    open.push(t);
    const err: unknown = await startWith(t, uniqueName('tls-no-ca'), new Inbox()).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(FleetError);
    expect((err as FleetError).message).toMatch(/TLS to Redis at 127\.0\.0\.1:\d+ failed \(.+\); check transport\.bullmq\.tls \(caFile for a private CA/);
    expect((err as FleetError).retriable).toBe(false);
  });

  it('a caFile that cannot be read fails naming the field', async () => {
    const t = new BullmqTransport(settings({ tls: { caFile: '/nonexistent/ca.pem' } }));
    open.push(t);
    const err: unknown = await startWith(t, uniqueName('tls-bad-file'), new Inbox()).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(FleetError);
    expect((err as FleetError).message).toMatch(/transport\.bullmq\.tls\.caFile: cannot read \/nonexistent\/ca\.pem \(ENOENT\)/);
  });
});
