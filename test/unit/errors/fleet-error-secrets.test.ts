import { inspect } from 'node:util';
import { describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { redisConnection } from '../../../src/transport/bullmq/redis-connection.ts';

const SENTINEL = 's3cr3t-SENTINEL';

/** What Node prints of an error nobody caught (an unhandled rejection of a Producer API call): inspect, causes and their fields included. */
const printed = (err: unknown): string => inspect(err, { depth: 8 });

describe('FleetError: credentials inside URLs', () => {
  it('a message built with a URL holding a password keeps the user and the host, not the password', () => {
    const e = new FleetError('TRANSPORT_ERROR', `cannot reach redis://fleet:${SENTINEL}@10.0.0.5:6379/0 (ECONNREFUSED)`);
    expect(e.message).toBe('cannot reach redis://fleet:***@10.0.0.5:6379/0 (ECONNREFUSED)');
    expect(e.toResultError().message).not.toContain(SENTINEL);
    expect(printed(e)).not.toContain(SENTINEL);
  });

  it('a transport.bullmq.redisUrl Node cannot parse: the INVALID_CONFIG error and its cause (err.input) hold no password', () => {
    let thrown: unknown;
    try {
      redisConnection({ redisUrl: `redis://fleet:${SENTINEL}@127.0.0.1:notaport/0` }, { lazyConnect: true });
    } catch (err) {
      thrown = err;
    }
    expect(FleetError.is(thrown, 'INVALID_CONFIG'), String(thrown)).toBe(true);
    expect((thrown as FleetError).message).toMatch(/is not a usable Redis URL: Invalid URL/);
    expect(((thrown as FleetError).cause as { code?: string }).code).toBe('ERR_INVALID_URL');
    expect(printed(thrown)).not.toContain(SENTINEL);
    expect(printed(thrown)).toContain('redis://fleet:***@127.0.0.1:notaport/0');
  });

  it('FleetError.from a foreign error quoting such a URL, in its message or its fields', () => {
    let invalid: unknown;
    try {
      new URL(`rediss://:${SENTINEL}@h:x`);
    } catch (err) {
      invalid = err;
    }
    const wrapped = FleetError.from(invalid, 'INVALID_CONFIG');
    expect(wrapped.message).toBe('Invalid URL');
    expect(printed(wrapped)).not.toContain(SENTINEL);
    const quoting = FleetError.from(new Error(`dial http://proxy:${SENTINEL}@proxy:3128 failed`), 'TRANSPORT_ERROR');
    expect(quoting.message).toBe('dial http://proxy:***@proxy:3128 failed');
    expect(printed(quoting)).not.toContain(SENTINEL);
  });
});
