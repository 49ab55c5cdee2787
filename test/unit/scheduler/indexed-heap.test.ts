import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { IndexedHeap } from '../../../src/scheduler/indexed-heap.ts';

interface Item {
  key: number;
  pos: number;
}

describe('IndexedHeap', () => {
  it('pops in key order after arbitrary pushes and removals by position', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 50 }), { maxLength: 200 }), fc.array(fc.nat(), { maxLength: 50 }), (keys, removals) => {
        const heap = new IndexedHeap<Item>((a, b) => a.key < b.key, (item, pos) => (item.pos = pos));
        const items = keys.map((key) => ({ key, pos: -1 }));
        for (const item of items) heap.push(item);
        const live = new Set(items);
        for (const r of removals) {
          if (live.size === 0) break;
          const victim = [...live][r % live.size] as Item;
          heap.removeAt(victim.pos);
          expect(victim.pos).toBe(-1);
          live.delete(victim);
        }
        const popped: number[] = [];
        for (let x = heap.pop(); x !== undefined; x = heap.pop()) popped.push(x.key);
        expect(popped).toEqual([...live].map((i) => i.key).sort((a, b) => a - b));
      }),
    );
  });

  it('drain empties and unmarks every element', () => {
    const heap = new IndexedHeap<Item>((a, b) => a.key < b.key, (item, pos) => (item.pos = pos));
    const items = [3, 1, 2].map((key) => ({ key, pos: -1 }));
    for (const item of items) heap.push(item);
    expect(heap.drain()).toHaveLength(3);
    expect(heap.size).toBe(0);
    expect(items.every((i) => i.pos === -1)).toBe(true);
    expect(() => heap.removeAt(0)).toThrow(RangeError);
  });
});
