import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { PartitionTracker } from '../../../src/transport/kafka/partition-tracker.ts';

describe('PartitionTracker', () => {
  it('commits only the contiguous settled prefix, over delivered offsets (gaps in offsets allowed)', () => {
    const t = new PartitionTracker();
    for (const o of [10, 11, 13, 20]) expect(t.deliver(o)).toBe(true);
    expect(t.inflight).toBe(4);
    t.settle(11);
    expect(t.takePrefix()).toBeUndefined(); // 10 still open
    t.settle(10);
    expect(t.takePrefix()?.commitNext).toBe(12);
    t.settle(20);
    expect(t.takePrefix()).toBeUndefined(); // 13 open
    t.settle(13);
    expect(t.takePrefix()?.commitNext).toBe(21);
    expect(t.inflight).toBe(0);
  });

  it('refuses offsets delivered before (kafkajs re-fetch after a rebalance)', () => {
    const t = new PartitionTracker();
    t.deliver(5);
    t.deliver(6);
    expect(t.deliver(6)).toBe(false);
    expect(t.deliver(3)).toBe(false);
    expect(t.deliver(7)).toBe(true);
  });

  it('never commits past a released delivery', () => {
    const t = new PartitionTracker();
    [1, 2, 3].forEach((o) => t.deliver(o));
    t.settle(1);
    t.release(2);
    t.settle(3);
    expect(t.takePrefix()?.commitNext).toBe(2);
    expect(t.takePrefix()).toBeUndefined();
    expect(t.inflight).toBe(0);
  });

  it('unsettle re-opens a settled entry; settle twice is refused', () => {
    const t = new PartitionTracker<string>();
    t.deliver(1);
    expect(t.settle(1, 'a')).toBe(true);
    expect(t.settle(1, 'b')).toBe(false);
    t.unsettle(1);
    expect(t.inflight).toBe(1);
    expect(t.prefix()).toBeUndefined();
    t.settle(1, 'c');
    expect(t.prefix()?.payloads).toEqual(['c']);
  });

  it('prefix() peeks, advance() consumes; payloads come in offset order; stuck ones are listed', () => {
    const t = new PartitionTracker<string>();
    [1, 2, 3, 4].forEach((o) => t.deliver(o));
    t.settle(2, 'b');
    t.settle(1, 'a');
    t.settle(4, 'd');
    const p = t.prefix();
    expect(p).toEqual({ commitNext: 3, count: 2, payloads: ['a', 'b'] });
    expect(t.prefix()).toEqual(p);
    t.advance(2);
    expect(t.prefix()).toBeUndefined();
    expect(t.stuckPayloads()).toEqual(['d']);
  });

  it('property: for any settle order the committed position is one past the longest settled prefix', () => {
    fc.assert(
      fc.property(fc.uniqueArray(fc.nat(1000), { minLength: 1, maxLength: 60 }), fc.func(fc.boolean()), (raw, keep) => {
        const offsets = [...raw].sort((a, b) => a - b);
        const t = new PartitionTracker();
        offsets.forEach((o) => t.deliver(o));
        const settled = new Set(offsets.filter((o) => keep(o)));
        let committed = -1;
        for (const o of [...settled].reverse()) {
          t.settle(o);
          committed = t.takePrefix()?.commitNext ?? committed;
        }
        let expected = -1;
        for (const o of offsets) {
          if (!settled.has(o)) break;
          expected = o + 1;
        }
        expect(committed).toBe(expected);
      }),
    );
  });

  it('stays compact over a long run', () => {
    const t = new PartitionTracker();
    for (let o = 0; o < 50_000; o++) {
      t.deliver(o);
      t.settle(o);
      if (o % 100 === 99) expect(t.takePrefix()?.commitNext).toBe(o + 1);
    }
    expect(t.inflight).toBe(0);
  });

  it('prefix(maxCount) stops after that many entries', () => {
    const t = new PartitionTracker<string>();
    for (const o of [3, 5, 9]) {
      t.deliver(o);
      t.settle(o, `p${o}`);
    }
    expect(t.prefix(1)).toEqual({ commitNext: 4, count: 1, payloads: ['p3'] });
    expect(t.prefix()).toEqual({ commitNext: 10, count: 3, payloads: ['p3', 'p5', 'p9'] });
  });
});
