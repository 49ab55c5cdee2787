/**
 * A binary min-heap whose elements know their own position, so that any element can be removed
 * in O(log n) — the scheduler keeps each queued request in two heaps (deadline order and arrival
 * order) and must pull it out of the other one when it leaves through either.
 *
 * `setPos(item, -1)` is called when an item leaves the heap; callers use that as "not queued here".
 */
export class IndexedHeap<T> {
  private readonly items: T[] = [];

  constructor(
    private readonly less: (a: T, b: T) => boolean,
    private readonly setPos: (item: T, pos: number) => void,
  ) {}

  get size(): number {
    return this.items.length;
  }

  peek(): T | undefined {
    return this.items[0];
  }

  push(item: T): void {
    this.items.push(item);
    this.up(this.items.length - 1);
  }

  pop(): T | undefined {
    const top = this.items[0];
    if (top !== undefined) this.removeAt(0);
    return top;
  }

  /** Removes the element at `pos` (as last reported through `setPos`). */
  removeAt(pos: number): void {
    const items = this.items;
    const removed = items[pos];
    if (removed === undefined) throw new RangeError(`heap position ${pos} out of range`);
    const last = items.pop() as T;
    this.setPos(removed, -1);
    if (pos === items.length) return;
    items[pos] = last;
    this.setPos(last, pos);
    this.up(pos);
    this.down(pos);
  }

  /** Empties the heap and returns its elements in no particular order. */
  drain(): T[] {
    const all = this.items.splice(0);
    for (const item of all) this.setPos(item, -1);
    return all;
  }

  private up(start: number): void {
    const items = this.items;
    const item = items[start] as T;
    let pos = start;
    while (pos > 0) {
      const parentPos = (pos - 1) >> 1;
      const parent = items[parentPos] as T;
      if (!this.less(item, parent)) break;
      items[pos] = parent;
      this.setPos(parent, pos);
      pos = parentPos;
    }
    items[pos] = item;
    this.setPos(item, pos);
  }

  private down(start: number): void {
    const items = this.items;
    const n = items.length;
    const item = items[start] as T;
    let pos = start;
    for (;;) {
      const left = 2 * pos + 1;
      if (left >= n) break;
      const right = left + 1;
      let child = left;
      if (right < n && this.less(items[right] as T, items[left] as T)) child = right;
      const childItem = items[child] as T;
      if (!this.less(childItem, item)) break;
      items[pos] = childItem;
      this.setPos(childItem, pos);
      pos = child;
    }
    items[pos] = item;
    this.setPos(item, pos);
  }
}
