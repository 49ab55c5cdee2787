import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { SuspectStore } from '../../../src/transport/bullmq/suspect-store.ts';

/** Just enough of ioredis over a Map of hashes. */
function fakeRedis(): Redis {
  const hashes = new Map<string, Map<string, number>>();
  const redis = {
    hget: async (key: string, field: string) => (hashes.get(key)?.has(field) ? String(hashes.get(key)?.get(field)) : null),
    hdel: async (key: string, field: string) => hashes.get(key)?.delete(field),
    multi() {
      const ops: Array<() => void> = [];
      const m = {
        hincrby(key: string, field: string, by: number) {
          ops.push(() => {
            const h = hashes.get(key) ?? hashes.set(key, new Map()).get(key)!;
            h.set(field, (h.get(field) ?? 0) + by);
          });
          return m;
        },
        expire: () => m,
        exec: async () => ops.forEach((op) => op()),
      };
      return m;
    },
  };
  return redis as unknown as Redis;
}

describe('SuspectStore', () => {
  it('counts hangs per job and queue, and forgets an answered job', async () => {
    const redis = fakeRedis();
    const store = new SuspectStore(() => redis, (q) => `p:${q}:npu-fleet-suspects`);
    const other = new SuspectStore(() => redis, (q) => `p:${q}:npu-fleet-suspects`); // another worker
    await store.mark([{ queue: 'q', jobId: 'a' }, { queue: 'q', jobId: 'b' }]);
    await other.mark([{ queue: 'q', jobId: 'a' }]);
    expect(await other.countOf('q', 'a')).toBe(2);
    expect(await store.countOf('q', 'b')).toBe(1);
    expect(await store.countOf('q', 'c')).toBe(0);
    expect(await store.countOf('r', 'a')).toBe(0);
    store.forget('q', 'a');
    await new Promise((r) => setImmediate(r));
    expect(await store.countOf('q', 'a')).toBe(0);
  });
});

describe('SuspectStore.countForFetched', () => {
  const job = (attemptsStarted: number, stalledCounter = 0) => ({ id: 'a', attemptsStarted, stalledCounter });

  it('reads for a job started before, unless every earlier start was this worker putting it back', async () => {
    const redis = fakeRedis();
    const store = new SuspectStore(() => redis, (q) => `p:${q}:s`);
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

  it('a slow or failing Redis counts as 0 and says why, after the bound', async () => {
    const stuck = { hget: () => new Promise<never>(() => undefined) } as unknown as Redis;
    const store = new SuspectStore(() => stuck, (q) => q, 50);
    const t0 = Date.now();
    const read = store.countForFetched('q', job(2));
    expect(read).toBeDefined();
    const r = await read;
    expect(r?.count).toBe(0);
    expect(String(r?.error)).toMatch(/took over 50 ms/);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(45);
  });
});
