// SuspectStore (the BullMQ transport's device-hang counts) against the real Redis of the test
// services, a unique key prefix per test; the stalled and failing Redis are real clients of a
// loopback port nothing listens on.
import { Redis, type RedisOptions } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { redisConnection } from '../../../src/transport/bullmq/bullmq-names.ts';
import { SuspectStore } from '../../../src/transport/bullmq/suspect-store.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { freePort } from '../../helpers/service-process.ts';

const clients: Redis[] = [];
afterEach(() => {
  for (const c of clients.splice(0)) c.disconnect();
});

function client(url: string, extra: RedisOptions = {}): Redis {
  const c = new Redis(url, extra);
  c.on('error', () => undefined);
  clients.push(c);
  return c;
}

/** A store on the real Redis, its keys under a prefix of its own. */
function storeOnRedis(): { store: SuspectStore; redis: Redis; keyOf: (q: string) => string } {
  const redis = client(getServices().redisUrl);
  const prefix = uniqueName('suspect-store');
  const keyOf = (q: string) => `${prefix}:${q}:npu-fleet-suspects`;
  return { store: new SuspectStore(() => redis, keyOf), redis, keyOf };
}

describe('SuspectStore', () => {
  it('counts hangs per job and queue, and forgets an answered job', async () => {
    const { store, redis, keyOf } = storeOnRedis();
    const otherRedis = client(getServices().redisUrl);
    const other = new SuspectStore(() => otherRedis, keyOf); // another worker, its own connection
    await store.mark([{ queue: 'q', jobId: 'a' }, { queue: 'q', jobId: 'b' }]);
    await other.mark([{ queue: 'q', jobId: 'a' }]);
    expect(await other.countOf('q', 'a')).toBe(2);
    expect(await store.countOf('q', 'b')).toBe(1);
    expect(await store.countOf('q', 'c')).toBe(0);
    expect(await store.countOf('r', 'a')).toBe(0);
    // An abandoned count does not live forever.
    expect(await redis.ttl(keyOf('q'))).toBeGreaterThan(0);
    store.forget('q', 'a');
    // Same connection: Redis runs the HDEL before this read.
    expect(await store.countOf('q', 'a')).toBe(0);
    expect(await store.countOf('q', 'b')).toBe(1);
  });
});

describe('SuspectStore.countForFetched', () => {
  const job = (attemptsStarted: number, stalledCounter = 0) => ({ id: 'a', attemptsStarted, stalledCounter });

  it('reads for a job started before, unless every earlier start was this worker putting it back', async () => {
    const { store } = storeOnRedis();
    await store.mark([{ queue: 'q', jobId: 'a' }]);
    expect(store.countForFetched('q', job(1))).toBeUndefined(); // first start: no read
    expect(await store.countForFetched('q', job(2))).toEqual({ count: 1 }); // put back by someone else
    expect(await store.countForFetched('q', job(1, 1))).toEqual({ count: 1 }); // stalled
    store.noteBounce('a');
    store.noteBounce('a');
    expect(store.countForFetched('q', job(3))).toBeUndefined(); // only our two bounces
    store.noteBounce('a');
    expect(await store.countForFetched('q', job(5))).toEqual({ count: 1 }); // one start more than our bounces
  });

  it('a stalled Redis counts as 0 and says why, after the bound', async () => {
    // As the transport's connections are: commands wait in the offline queue while Redis is away.
    const stalled = redisConnection(`redis://127.0.0.1:${await freePort()}`, { retryStrategy: () => 100 });
    stalled.on('error', () => undefined);
    clients.push(stalled);
    const store = new SuspectStore(() => stalled, (q) => q, 50);
    const t0 = Date.now();
    const read = store.countForFetched('q', job(2));
    expect(read).toBeDefined();
    const r = await read;
    expect(r?.count).toBe(0);
    expect(String(r?.error)).toMatch(/took over 50 ms/);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(45);
  });

  it('a failing Redis counts as 0 and says why', async () => {
    // No offline queue: a command on the down connection fails at once.
    const down = client(`redis://127.0.0.1:${await freePort()}`, { enableOfflineQueue: false, retryStrategy: () => 100 });
    const store = new SuspectStore(() => down, (q) => q, 5_000);
    const t0 = Date.now();
    const r = await store.countForFetched('q', job(2));
    expect(r?.count).toBe(0);
    expect(r?.error).toBeInstanceOf(Error);
    expect(String(r?.error)).not.toMatch(/took over/);
    expect(Date.now() - t0).toBeLessThan(5_000);
  });
});
