import type { Consumer } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import type { TrackedPartition } from '../../../src/transport/kafka/kafka-eos.ts';
import { decodeCommitMetadata, encodeCommitMetadata, OffsetCommitter, tpKey } from '../../../src/transport/kafka/offset-committer.ts';
import { PartitionTracker } from '../../../src/transport/kafka/partition-tracker.ts';

type Commit = { topic: string; partition: number; offset: string; metadata: string | null };

function setup(failFirst = 0) {
  const commits: Commit[][] = [];
  let failures = failFirst;
  const consumer = {
    commitOffsets(offsets: Commit[]) {
      if (failures > 0) {
        failures--;
        return Promise.reject(new Error('coordinator moved'));
      }
      commits.push(offsets);
      return Promise.resolve();
    },
  } as unknown as Consumer;
  const partitions = new Map<string, TrackedPartition>();
  const add = (topic: string, partition: number): PartitionTracker<never> => {
    const tracker = new PartitionTracker<never>();
    partitions.set(tpKey(topic, partition), { topic, partition, tracker } as TrackedPartition);
    return tracker;
  };
  return { commits, partitions, add, committer: new OffsetCommitter(partitions, () => consumer) };
}

describe('OffsetCommitter', () => {
  it('commits the contiguous settled prefix, with the highest delivered offset as metadata', async () => {
    const { commits, add, committer } = setup();
    const t = add('req', 0);
    for (const o of [5, 6, 7, 8]) t.deliver(o);
    t.settle(5);
    t.settle(6);
    t.settle(8); // 7 still open: the prefix ends at 6
    await committer.commit();
    expect(commits).toEqual([[{ topic: 'req', partition: 0, offset: '7', metadata: '8' }]]);
    await committer.commit();
    expect(commits).toHaveLength(1); // nothing new
    t.settle(7);
    await committer.commit();
    expect(commits[1]).toEqual([{ topic: 'req', partition: 0, offset: '9', metadata: '8' }]);
  });

  it('keeps a failed commit and sends it with the next one', async () => {
    const { commits, add, committer } = setup(1);
    const t = add('req', 1);
    t.deliver(0);
    t.settle(0);
    await expect(committer.commit()).rejects.toThrow(/committing their offsets failed/);
    expect(committer.hasPending).toBe(true);
    await committer.commit();
    expect(commits).toEqual([[{ topic: 'req', partition: 1, offset: '1', metadata: '0' }]]);
    expect(committer.hasPending).toBe(false);
  });

  it('drops a failed commit of a partition revoked meanwhile (its new owner commits it)', async () => {
    const { commits, add, partitions, committer } = setup(1);
    const t = add('req', 2);
    t.deliver(0);
    t.settle(0);
    await expect(committer.commit()).rejects.toThrow();
    partitions.delete(tpKey('req', 2));
    committer.forget(tpKey('req', 2));
    await committer.commit();
    expect(commits).toEqual([]);
  });
});

describe('commit metadata', () => {
  it('round-trips the highest delivered offset and the suspects at or past the commit position', () => {
    const raw = encodeCommitMetadata(812, new Map([[700, 3], [790, 1], [791, 2]]), 790);
    expect(raw).toBe('812;s=790:1,791:2');
    expect(decodeCommitMetadata(raw)).toEqual({ highest: 812, suspects: new Map([[790, 1], [791, 2]]) });
  });

  it('reads what earlier versions wrote (a plain number), and nothing from garbage', () => {
    expect(decodeCommitMetadata('812')).toEqual({ highest: 812, suspects: new Map() });
    expect(decodeCommitMetadata(null)).toEqual({ highest: undefined, suspects: new Map() });
    expect(decodeCommitMetadata('')).toEqual({ highest: undefined, suspects: new Map() });
    expect(decodeCommitMetadata('abc;s=x:1,5:0,6:-1,7:2')).toEqual({ highest: undefined, suspects: new Map([[7, 2]]) });
  });

  it('keeps the metadata within the brokers\u2019 4 KiB, keeping the higher counts (the likelier poison) first', () => {
    const many = new Map<number, number>([[1_000_000_003, 2], [1_000_000_001, 3]]);
    for (let i = 0; i < 1000; i++) if (!many.has(1_000_000_000 + i)) many.set(1_000_000_000 + i, 1);
    const raw = encodeCommitMetadata(1_000_000_999, many, 0);
    expect(raw.length).toBeLessThan(4096);
    const kept = decodeCommitMetadata(raw).suspects;
    expect(kept.get(1_000_000_001)).toBe(3);
    expect(kept.get(1_000_000_003)).toBe(2);
    expect(kept.size).toBeGreaterThan(200);
    expect(kept.size).toBeLessThan(1000);
    const offsets = [...kept.keys()];
    expect(offsets).toEqual([...offsets].sort((a, b) => a - b));
  });

  it('reads only explicit, non-negative offset:count pairs', () => {
    expect(decodeCommitMetadata('9;s=:1,-5:1,3:,4:1.5,6:1').suspects).toEqual(new Map([[6, 1]]));
  });
});

describe('OffsetCommitter suspects', () => {
  it('markSuspect commits at once, at the current position, with the counts; they leave once committed past', async () => {
    const { commits, add, committer } = setup();
    const t = add('req', 0);
    for (const o of [10, 11, 12]) t.deliver(o);
    await committer.markSuspect([{ key: tpKey('req', 0), offset: 11 }]);
    expect(commits).toEqual([[{ topic: 'req', partition: 0, offset: '10', metadata: '12;s=11:1' }]]);
    expect(committer.suspectCount(tpKey('req', 0), 11)).toBe(1);
    await committer.markSuspect([{ key: tpKey('req', 0), offset: 11 }]);
    expect(commits[1]?.[0]?.metadata).toBe('12;s=11:2');
    for (const o of [10, 11, 12]) t.settle(o);
    await committer.commit();
    expect(commits[2]).toEqual([{ topic: 'req', partition: 0, offset: '13', metadata: '12' }]);
    expect(committer.suspectCount(tpKey('req', 0), 11)).toBe(0);
  });

  it('adopts a previous owner\u2019s suspects and carries them in its own commits', async () => {
    const { commits, add, committer } = setup();
    const t = add('req', 1);
    committer.adoptSuspects(tpKey('req', 1), new Map([[21, 1]]));
    for (const o of [20, 21, 22]) t.deliver(o);
    t.settle(20);
    await committer.commit();
    expect(commits).toEqual([[{ topic: 'req', partition: 1, offset: '21', metadata: '22;s=21:1' }]]);
  });
});
