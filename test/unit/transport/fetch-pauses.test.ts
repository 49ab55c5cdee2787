import type { Consumer } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { FetchPauses, type BoundedPartition } from '../../../src/transport/kafka/fetch-pauses.ts';
import { tpKey } from '../../../src/transport/kafka/offset-committer.ts';

/** Records what kafkajs would fetch: paused topics and paused partitions per topic. */
function fakeConsumer() {
  const topics = new Set<string>();
  const parts = new Map<string, Set<number>>();
  const consumer = {
    pause(list: Array<{ topic: string; partitions?: number[] }>) {
      for (const t of list) {
        if (t.partitions === undefined) topics.add(t.topic);
        else for (const p of t.partitions) (parts.get(t.topic) ?? parts.set(t.topic, new Set()).get(t.topic)!).add(p);
      }
    },
    resume(list: Array<{ topic: string }>) {
      for (const t of list) {
        topics.delete(t.topic);
        parts.delete(t.topic);
      }
    },
  };
  const fetched = (topic: string, partition: number): boolean => !topics.has(topic) && !(parts.get(topic)?.has(partition) ?? false);
  return { consumer: consumer as unknown as Consumer, fetched };
}

const part = (topic: string, partition: number, priority: number | undefined, inflight: number): BoundedPartition => ({ topic, partition, priority, tracker: { inflight } });

function setup() {
  const k = fakeConsumer();
  const pauses = new FetchPauses(() => k.consumer, () => false, { lowPriorityInflight: 10, topPriorityInflight: 100 }, undefined);
  return { ...k, pauses };
}

describe('FetchPauses', () => {
  it('pauses a low-priority partition at its bound and resumes it at half, leaving its neighbours alone', () => {
    const { pauses, fetched } = setup();
    const steps: Array<[number, boolean]> = [[9, true], [10, false], [6, false], [5, true]];
    for (const [inflight, expected] of steps) {
      pauses.bound(part('p2', 3, 2, inflight));
      expect(fetched('p2', 3), `inflight ${inflight}`).toBe(expected);
      expect(fetched('p2', 4)).toBe(true);
    }
  });

  it('bounds priority 0 (and a single all-priorities topic) by the larger limit only', () => {
    const { pauses, fetched } = setup();
    pauses.bound(part('p0', 0, 0, 50));
    pauses.bound(part('all', 0, undefined, 50));
    expect(fetched('p0', 0) && fetched('all', 0)).toBe(true);
    pauses.bound(part('p0', 0, 0, 100));
    expect(fetched('p0', 0)).toBe(false);
  });

  it('keeps the reasons apart: lifting backpressure leaves a bounded partition paused, and stop overrides both', () => {
    const { pauses, fetched } = setup();
    pauses.bound(part('p2', 1, 2, 10));
    pauses.pause(['p2']);
    expect(fetched('p2', 0)).toBe(false);
    pauses.resume(['p2']);
    expect(fetched('p2', 0)).toBe(true);
    expect(fetched('p2', 1)).toBe(false);
    pauses.stop(['p2', 'p0']);
    expect(pauses.stopped).toBe(true);
    expect(fetched('p0', 0)).toBe(false);
    pauses.resume(['p2']);
    expect(fetched('p2', 0)).toBe(false);
  });

  it('after a rebalance forgets the bounds of partitions it lost', () => {
    const { pauses, fetched } = setup();
    pauses.bound(part('p2', 1, 2, 10));
    pauses.bound(part('p2', 2, 2, 10));
    pauses.reassigned(new Set([tpKey('p2', 2)]), ['p2']);
    expect(fetched('p2', 1)).toBe(true);
    expect(fetched('p2', 2)).toBe(false);
  });

  it('does nothing before the consumer exists and survives kafkajs refusing a pause', () => {
    const none = new FetchPauses(() => undefined, () => false, { lowPriorityInflight: 1, topPriorityInflight: 1 }, undefined);
    expect(() => none.pause(['t'])).not.toThrow();
    const refusing = { pause: () => { throw new Error('not joined'); }, resume: () => undefined } as unknown as Consumer;
    const debug: unknown[] = [];
    const logger = { debug: (o: unknown) => debug.push(o), info: () => {}, warn: () => {}, error: () => {} };
    const p = new FetchPauses(() => refusing, () => false, { lowPriorityInflight: 1, topPriorityInflight: 1 }, logger as never);
    expect(() => p.pause(['t'])).not.toThrow();
    expect(debug).toHaveLength(1);
  });
});
