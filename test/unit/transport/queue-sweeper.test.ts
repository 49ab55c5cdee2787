import { describe, expect, it } from 'vitest';
import { QueueSweeper } from '../../../src/transport/bullmq/queue-sweeper.ts';

describe('QueueSweeper', () => {
  it('removes expired waiting jobs in chunks until a chunk comes back short, per target with a TTL', async () => {
    const calls: Array<[string, number, number]> = [];
    const backlog = new Map([['m.replies', 2_500], ['m.dlq', 3]]);
    const sweeper = new QueueSweeper(
      [
        { queue: 'm.replies', ttlMs: 60_000 },
        { queue: 'm.dlq', ttlMs: 0 },
      ],
      async (queue, grace, limit) => {
        calls.push([queue, grace, limit]);
        const n = Math.min(limit, backlog.get(queue) ?? 0);
        backlog.set(queue, (backlog.get(queue) ?? 0) - n);
        return n;
      },
    );
    await sweeper.sweep();
    expect(calls).toEqual([
      ['m.replies', 60_000, 1_000],
      ['m.replies', 60_000, 1_000],
      ['m.replies', 60_000, 1_000],
    ]);
    expect(backlog.get('m.replies')).toBe(0);
    expect(backlog.get('m.dlq')).toBe(3); // TTL 0: kept
  });

  it.each([
    [[60_000], 30_000],
    [[86_400_000, 604_800_000], 60_000],
    [[100], 100],
    [[0, 0], 0],
  ])('sweeps every half of the shortest TTL %j, within 100 ms..1 min: %i ms', (ttls, every) => {
    const sweeper = new QueueSweeper(ttls.map((ttlMs, i) => ({ queue: `q${i}`, ttlMs })), async () => 0);
    expect(sweeper.intervalMs).toBe(every);
  });

  it('a failing clean is reported and the next target is still swept', async () => {
    const warnings: string[] = [];
    const swept: string[] = [];
    const sweeper = new QueueSweeper(
      [
        { queue: 'a', ttlMs: 1 },
        { queue: 'b', ttlMs: 1 },
      ],
      async (queue) => {
        if (queue === 'a') throw new Error('redis down');
        swept.push(queue);
        return 0;
      },
      { warn: (_o, msg) => warnings.push(msg), info: () => {}, error: () => {}, debug: () => {} },
    );
    await sweeper.sweep();
    expect(swept).toEqual(['b']);
    expect(warnings).toEqual(['removing expired waiting jobs failed; tried again at the next sweep']);
  });
});
