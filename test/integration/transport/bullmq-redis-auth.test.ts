// BullMQ against a Redis that wants a login: requirepass (default user) and an ACL user, both in
// transport.bullmq.redisUrl. The shared test Redis has no password, so each test starts its own.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BullmqSettingsSchema, type BullmqSettings } from '../../../src/contracts/fleet-config.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { uniqueName } from '../../helpers/unique-name.ts';
import { Inbox, makeRequest, outcomeFor, startWith } from './conformance-kit.ts';
import { startRedisWith } from './bullmq-redis-servers.ts';

const PASSWORD = 'pw-Zq7x-not-in-logs';
const ACL_PASSWORD = 'acl-Kk9v-not-in-logs';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});

let port = 0;
beforeAll(async () => {
  // One server: the default user has a password, and an ACL user 'fleet' may do what BullMQ does.
  const dir = tempDir('bullmq-redis-auth-');
  const aclFile = join(dir, 'users.acl');
  writeFileSync(aclFile, `user default on >${PASSWORD} ~* &* +@all\nuser fleet on >${ACL_PASSWORD} ~* &* +@all\n`);
  ({ port } = await startRedisWith(dir, ['--aclfile', aclFile]));
});

/** Every line a pino logger at debug writes, as text. */
function recordingLogger(): { logger: pino.Logger; text(): string } {
  const lines: string[] = [];
  const logger = pino({ level: 'debug' }, new Writable({ write: (chunk: Buffer, _enc, done) => (lines.push(chunk.toString('utf8')), done()) }));
  return { logger, text: () => lines.join('') };
}

function settings(redisUrl: string, extra: Partial<BullmqSettings> = {}): BullmqSettings {
  return BullmqSettingsSchema.parse({ redisUrl, prefix: uniqueName('auth'), connectTimeoutMs: 3_000, ...extra });
}

async function serveOne(s: BullmqSettings, id: string, logger: pino.Logger): Promise<void> {
  const model = uniqueName(id);
  const t = new BullmqTransport(s, { logger, stalledIntervalMs: 500 });
  open.push(t);
  await t.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void t.settle(ds.map(outcomeFor)) });
  const producer = new BullmqProducer(s, { logger });
  open.push(producer);
  const result = await producer.request(makeRequest(model, id, 0), { timeoutMs: 30_000 });
  expect(result.status).toBe('ok');
  expect(result.id).toBe(id);
}

describe('bullmq with a Redis password', () => {
  it('requirepass in the URL (redis://:password@host:port): a worker and a producer serve a request', async () => {
    const log = recordingLogger();
    await serveOne(settings(`redis://:${PASSWORD}@127.0.0.1:${port}`), 'over-requirepass', log.logger);
    expect(log.text()).not.toContain(PASSWORD);
  });

  it('an ACL user in the URL (redis://user:password@host:port): a worker and a producer serve a request', async () => {
    const log = recordingLogger();
    await serveOne(settings(`redis://fleet:${ACL_PASSWORD}@127.0.0.1:${port}`), 'over-acl-user', log.logger);
    expect(log.text()).not.toContain(ACL_PASSWORD);
  });

  it('a wrong password fails the worker start and the first publish naming transport.bullmq.redisUrl, never the password', async () => {
    const wrong = 'wrong-Pp3r-password';
    const log = recordingLogger();
    const s = settings(`redis://fleet:${wrong}@127.0.0.1:${port}`);
    const t = new BullmqTransport(s, { logger: log.logger });
    open.push(t);
    const startErr: unknown = await startWith(t, uniqueName('wrong-pass'), new Inbox()).then(() => undefined, (e: unknown) => e);
    const producer = new BullmqProducer(s, { logger: log.logger });
    open.push(producer);
    const publishErr: unknown = await producer.publish(makeRequest(uniqueName('wrong-pass'), 'x', 0)).then(() => undefined, (e: unknown) => e);
    for (const err of [startErr, publishErr]) {
      expect(err).toBeInstanceOf(FleetError);
      const e = err as FleetError;
      expect(e.message).toMatch(/Redis at 127\.0\.0\.1:\d+ refused the login of transport\.bullmq\.redisUrl \(user fleet\); check the user name and password/);
      expect(e.retriable).toBe(false);
      expect(`${e.message} ${JSON.stringify(e)} ${String(e.stack)}`).not.toContain(wrong);
    }
    expect(log.text()).not.toContain(wrong);
  });

  it('no password where Redis wants one fails the start saying the URL needs a login', async () => {
    const t = new BullmqTransport(settings(`redis://127.0.0.1:${port}`));
    open.push(t);
    const err: unknown = await startWith(t, uniqueName('no-pass'), new Inbox()).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(FleetError);
    expect((err as FleetError).message).toMatch(/wants a login and transport\.bullmq\.redisUrl has no password; write it as redis:\/\/user:password@host:port/);
    expect((err as FleetError).retriable).toBe(false);
  });
});
