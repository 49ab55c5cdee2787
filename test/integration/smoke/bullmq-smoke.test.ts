// Proves the BullMQ plumbing is real: jobs go through the Redis server and come out by priority
// (lower number first, FIFO within one priority).
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { getServices, uniqueName } from '../../helpers/services.ts';

const WAIT_MS = 20_000;
const cleanups: Array<() => Promise<unknown>> = [];

afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
});

function connection(): Redis {
  // Workers block on Redis, so BullMQ requires unlimited per-request retries.
  const redis = new Redis(getServices().redisUrl, { maxRetriesPerRequest: null });
  cleanups.push(() => redis.quit());
  return redis;
}

describe('bullmq smoke (real redis)', () => {
  it('talks to a real redis-server', async () => {
    const redis = connection();
    const key = uniqueName('smoke-key');
    await redis.set(key, 'v', 'EX', 60);
    expect(await redis.get(key)).toBe('v');
    expect(await redis.info('server')).toMatch(/redis_version:\d+\.\d+/);
  });

  it('adds jobs and processes them by priority, lower number first', async () => {
    const name = uniqueName('smoke-queue');
    const queue = new Queue(name, { connection: connection() });
    cleanups.push(async () => {
      await queue.obliterate({ force: true });
      await queue.close();
    });
    const jobs = [
      { id: 'p5', priority: 5 },
      { id: 'p1-first', priority: 1 },
      { id: 'p3', priority: 3 },
      { id: 'p1-second', priority: 1 },
      { id: 'p2', priority: 2 },
    ];
    for (const job of jobs) await queue.add('infer', { id: job.id }, { priority: job.priority });
    expect(await queue.getJobCountByTypes('prioritized')).toBe(jobs.length);

    // The worker starts only after every job is queued, so the order is the queue's, not arrival's.
    const order: string[] = [];
    const worker = new Worker<{ id: string }, string>(
      name,
      async (job) => {
        order.push(job.data.id);
        return `done-${job.data.id}`;
      },
      { connection: connection(), concurrency: 1, autorun: false },
    );
    cleanups.push(() => worker.close());
    const allDone = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`processed ${order.join(',')} within ${WAIT_MS} ms`)), WAIT_MS);
      worker.on('completed', () => {
        if (order.length === jobs.length) {
          clearTimeout(timer);
          resolve();
        }
      });
      worker.on('failed', (_job, error) => reject(error));
    });
    void worker.run();
    await allDone;

    expect(order).toEqual(['p1-first', 'p1-second', 'p2', 'p3', 'p5']);
    expect(await queue.getJobCountByTypes('completed')).toBe(jobs.length);
    const completed = await queue.getCompleted();
    expect(completed.map((j) => j.returnvalue).sort()).toEqual(jobs.map((j) => `done-${j.id}`).sort());
  });
});
