import { IndexedHeap } from './indexed-heap.ts';
import { edfLess } from './lane.ts';
import type { Entry } from './lane.ts';

/**
 * The queued requests with a deadline, by the latest start that still meets it alone:
 * deadline − estimate(the smallest gear holding the request). The lanes' deadline heaps cannot
 * answer that: a larger request (a slower gear) behind a viable head runs out of time first.
 *
 * One deadline heap per gear rather than one heap keyed by latest start: within a gear the
 * estimate is common, so deadline order IS latest-start order, and a completion that moves an
 * estimate re-keys nothing (a single heap would need a full rebuild on every completion). The
 * price is a look at each gear's head per sweep: O(gears holding deadlines), a handful with
 * configured gears, at most the distinct request sizes queued without them; no scan of the queue.
 */
export class ExpiryIndex<P> {
  /** By gear value; created on first use. */
  private readonly byGear: (IndexedHeap<Entry<P>> | undefined)[] = [];
  /** Gears whose heap is not empty, in no order. */
  private readonly active: number[] = [];

  add(entry: Entry<P>): void {
    if (entry.deadline === Infinity) return;
    let heap = this.byGear[entry.gear];
    if (heap === undefined) {
      heap = new IndexedHeap<Entry<P>>(edfLess, (e, pos) => (e.expiryPos = pos));
      this.byGear[entry.gear] = heap;
    }
    heap.push(entry);
    if (heap.size === 1) this.active.push(entry.gear);
  }

  remove(entry: Entry<P>): void {
    if (entry.expiryPos < 0) return;
    const heap = this.byGear[entry.gear] as IndexedHeap<Entry<P>>;
    heap.removeAt(entry.expiryPos);
    if (heap.size === 0) {
      const i = this.active.indexOf(entry.gear);
      this.active[i] = this.active[this.active.length - 1] as number;
      this.active.pop();
    }
  }

  /**
   * Hands `expire` every request `hopeless` rules out. `hopeless` must be monotone in the deadline
   * within a gear (a later deadline is never more hopeless), so each gear stops at its first viable
   * request. `expire` must remove the request from this index.
   */
  sweep(hopeless: (e: Entry<P>) => boolean, expire: (e: Entry<P>) => void): void {
    // Backwards: emptying a gear swaps the last active gear (already visited) into its slot.
    for (let i = this.active.length - 1; i >= 0; i--) {
      const heap = this.byGear[this.active[i] as number] as IndexedHeap<Entry<P>>;
      for (let head = heap.peek(); head !== undefined && hopeless(head); head = heap.peek()) expire(head);
    }
  }

  /** The earliest latest-start over every queued request (Infinity: none has a deadline). */
  earliestLatestStart(estimateMs: (gear: number) => number): number {
    let at = Infinity;
    for (const gear of this.active) {
      const head = (this.byGear[gear] as IndexedHeap<Entry<P>>).peek() as Entry<P>;
      at = Math.min(at, head.deadline - estimateMs(gear));
    }
    return at;
  }
}
