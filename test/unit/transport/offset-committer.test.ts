import type { Consumer } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import type { TrackedPartition } from '../../../src/transport/kafka/kafka-eos.ts';
import { OffsetCommitter, tpKey } from '../../../src/transport/kafka/offset-committer.ts';
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
