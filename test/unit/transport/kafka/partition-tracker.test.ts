import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { PartitionTracker } from '../../../../src/transport/kafka/partition-tracker.ts';

type State = 'open' | 'settled' | 'released';

/** What a step does to the tracker (indices pick among the deliveries so far). */
type Step =
  | { kind: 'deliver'; gap: number }
  | { kind: 'redeliver'; pick: number }
  | { kind: 'settle'; pick: number }
  | { kind: 'unsettle'; pick: number }
  | { kind: 'release'; pick: number }
  | { kind: 'commit' };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('deliver' as const), gap: fc.nat(3) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('redeliver' as const), pick: fc.nat() }) },
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('settle' as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('unsettle' as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('release' as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('commit' as const) }) },
);

/**
 * A reference model of one partition: every delivery in offset order with its state, and the
 * committed position. Kafka offsets have gaps (compaction, transaction markers), so deliveries
 * skip offsets at random.
 */
class Model {
  readonly deliveries: Array<{ offset: number; state: State }> = [];
  committed = 0;
  next = 0;

  get uncommitted(): Array<{ offset: number; state: State }> {
    return this.deliveries.filter((d) => d.offset >= this.committed);
  }

  /** The longest run of settled deliveries from the first uncommitted one. */
  prefix(): Array<{ offset: number; state: State }> {
    const out = [];
    for (const d of this.uncommitted) {
      if (d.state !== 'settled') break;
      out.push(d);
    }
    return out;
  }
}

describe('PartitionTracker', () => {
  it('commits only the contiguous settled prefix, whatever order deliveries settle, fail and are released in', () => {
    fc.assert(
      fc.property(fc.array(stepArb, { minLength: 1, maxLength: 300 }), (steps) => {
        const t = new PartitionTracker<string>();
        const m = new Model();
        for (const step of steps) {
          const known = m.deliveries;
          const picked = known.length === 0 || step.kind === 'deliver' || step.kind === 'commit' ? undefined : known[step.pick % known.length];
          switch (step.kind) {
            case 'deliver': {
              const offset = m.next + step.gap;
              m.next = offset + 1;
              expect(t.deliver(offset)).toBe(true);
              m.deliveries.push({ offset, state: 'open' });
              break;
            }
            case 'redeliver':
              // kafkajs fetching again from an older position: never a second delivery.
              if (picked !== undefined) expect(t.deliver(picked.offset)).toBe(false);
              break;
            case 'settle':
              if (picked === undefined) break;
              expect(t.settle(picked.offset, `p${picked.offset}`)).toBe(picked.state === 'open' && picked.offset >= m.committed);
              if (picked.state === 'open' && picked.offset >= m.committed) picked.state = 'settled';
              break;
            case 'unsettle':
              // A failed publish re-opens a settled delivery that is not committed yet.
              if (picked === undefined) break;
              t.unsettle(picked.offset);
              if (picked.state === 'settled' && picked.offset >= m.committed) picked.state = 'open';
              break;
            case 'release':
              if (picked === undefined) break;
              expect(t.release(picked.offset)).toBe(picked.state === 'open' && picked.offset >= m.committed);
              if (picked.state === 'open' && picked.offset >= m.committed) picked.state = 'released';
              break;
            case 'commit': {
              const want = m.prefix();
              const got = t.takePrefix();
              if (want.length === 0) {
                expect(got).toBeUndefined();
                break;
              }
              const last = want[want.length - 1] as { offset: number };
              expect(got).toEqual({ commitNext: last.offset + 1, count: want.length, payloads: want.map((d) => `p${d.offset}`) });
              m.committed = last.offset + 1;
              break;
            }
          }
          const uncommitted = m.uncommitted;
          expect(t.inflight).toBe(uncommitted.filter((d) => d.state === 'open').length);
          expect(t.highestDelivered).toBe(m.next - 1 >= 0 && m.deliveries.length > 0 ? (m.deliveries[m.deliveries.length - 1] as { offset: number }).offset : -1);
          // Where a commit may point now: never past an open or released delivery.
          expect(t.uncommittedFrom).toBe(uncommitted[0]?.offset ?? (t.highestDelivered + 1));
          expect(t.stuckPayloads()).toEqual(uncommitted.filter((d) => d.state === 'settled').map((d) => `p${d.offset}`));
          const prefix = t.prefix();
          const want = m.prefix();
          expect(prefix?.count ?? 0).toBe(want.length);
          if (prefix !== undefined) {
            const firstOpen = uncommitted.find((d) => d.state !== 'settled');
            expect(firstOpen === undefined || prefix.commitNext <= firstOpen.offset).toBe(true);
          }
        }
      }),
      { numRuns: 400 },
    );
  });

  it('a prefix taken for a transaction and advanced later drops exactly what it covered, with settles in between', () => {
    fc.assert(
      fc.property(fc.array(fc.boolean(), { minLength: 2, maxLength: 2_500 }), fc.nat(), (settledEarly, split) => {
        const t = new PartitionTracker<number>();
        for (let o = 0; o < settledEarly.length; o++) t.deliver(o * 2);
        // Settled before the transaction starts, in random order: the prefix runs up to the first gap.
        settledEarly.forEach((early, i) => early && t.settle(i * 2, i));
        const inTxn = t.prefix();
        const covered = inTxn?.count ?? 0;
        // While it is in flight the rest settles (the next transaction takes it).
        const cut = split % settledEarly.length;
        settledEarly.forEach((early, i) => !early && i >= cut && t.settle(i * 2, i));
        if (inTxn !== undefined) t.advance(inTxn.count);
        const next = t.prefix();
        const firstOpen = settledEarly.findIndex((early, i) => !early && i < cut);
        // The next prefix starts right after the first one and stops at the first delivery still open.
        const expectedCount = (firstOpen === -1 ? settledEarly.length : firstOpen) - covered;
        expect(next?.count ?? 0).toBe(Math.max(0, expectedCount));
        if (next !== undefined) expect(next.payloads[0]).toBe(covered);
      }),
      { numRuns: 200 },
    );
  });
});
