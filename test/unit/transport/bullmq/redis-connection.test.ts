import { describe, expect, it } from 'vitest';
import { BullmqSettingsSchema } from '../../../../src/contracts/fleet-config.ts';
import { hideCredentials, redisConnection, redisWhere } from '../../../../src/transport/bullmq/redis-connection.ts';

describe('hideCredentials', () => {
  it('masks the password of a failed AUTH (password alone, or user and password) and of HELLO ... AUTH', () => {
    const alone = { command: { name: 'auth', args: ['s3cret'] } };
    const withUser = { command: { name: 'auth', args: ['fleet', 's3cret'] } };
    const hello = { command: { name: 'hello', args: ['3', 'AUTH', 'fleet', 's3cret', 'SETNAME', 'x'] } };
    for (const err of [alone, withUser, hello]) hideCredentials(err);
    expect(alone.command.args).toEqual(['***']);
    expect(withUser.command.args).toEqual(['fleet', '***']);
    expect(hello.command.args).toEqual(['3', 'AUTH', 'fleet', '***', 'SETNAME', 'x']);
  });

  it('leaves other commands and errors without a command as they are', () => {
    const get = { command: { name: 'get', args: ['key'] } };
    hideCredentials(get);
    hideCredentials(new Error('x'));
    hideCredentials(undefined);
    expect(get.command.args).toEqual(['key']);
  });
});

describe('transport.bullmq tls and sentinel settings', () => {
  const base = { redisUrl: 'redis://:pw@redis:6379' };

  it('certFile and keyFile go together', () => {
    const r = BullmqSettingsSchema.safeParse({ ...base, tls: { certFile: '/c.pem' } });
    expect(r.success).toBe(false);
    expect(JSON.stringify(r.error?.issues)).toContain('certFile and keyFile go together');
  });

  it('sentinels are host:port, at least one; errors name the master and the sentinels, never the URL or its password', () => {
    expect(BullmqSettingsSchema.safeParse({ ...base, sentinel: { name: 'm', sentinels: [] } }).success).toBe(false);
    expect(BullmqSettingsSchema.safeParse({ ...base, sentinel: { name: 'm', sentinels: ['sentinel-0'] } }).success).toBe(false);
    const s = BullmqSettingsSchema.parse({ ...base, sentinel: { name: 'm', sentinels: ['sentinel-0:26379', 'sentinel-1:26379'] } });
    expect(redisWhere(s)).toBe('Redis master m via the sentinels sentinel-0:26379, sentinel-1:26379');
    expect(redisWhere(BullmqSettingsSchema.parse(base))).toBe('Redis at redis:6379');
  });
});

describe('sentinel connections', () => {
  // A frozen sentinel takes the TCP connection and never answers: ioredis's default was to wait for it
  // for good (test/integration/transport/bullmq-redis-sentinels-down.test.ts drills it).
  it('wait for one sentinel at most 1 s, and at most connectTimeoutMs / sentinels, before asking the next', async () => {
    const sentinel = { name: 'm', sentinels: ['127.0.0.1:1', '127.0.0.1:2', '127.0.0.1:3'] };
    const waits: unknown[] = [];
    for (const connectTimeoutMs of [15_000, 1_500, undefined]) {
      const c = redisConnection({ redisUrl: 'redis://sentinel', sentinel, ...(connectTimeoutMs === undefined ? {} : { connectTimeoutMs }) }, { lazyConnect: true });
      waits.push(c.options.sentinelCommandTimeout);
      const ended = new Promise((r) => c.once('end', r));
      c.disconnect();
      await ended;
    }
    expect(waits).toEqual([1_000, 500, 1_000]);
  });
});
