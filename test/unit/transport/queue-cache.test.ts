import { describe, expect, it } from 'vitest';
import { QueueCache } from '../../../src/transport/bullmq/queue-cache.ts';

class FakeQueue {
  closed = false;
  constructor(readonly name: string) {}
  async close(): Promise<void> {
    this.closed = true;
  }
}

describe('QueueCache', () => {
  it('reuses a queue by name and closes the least recently used idle ones past the bound', () => {
    const opened: FakeQueue[] = [];
    const cache = new QueueCache((name) => {
      const q = new FakeQueue(name);
      opened.push(q);
      return q;
    }, 2);
    const use = (name: string): FakeQueue => {
      const q = cache.acquire(name);
      cache.release(name);
      return q;
    };
    const a = use('a');
    expect(use('a')).toBe(a);
    use('b');
    use('a'); // a is now the most recently used
    use('c');
    expect(cache.size).toBe(2);
    expect(opened.filter((q) => q.closed).map((q) => q.name)).toEqual(['b']);
    expect(use('a')).toBe(a);
    expect(use('b')).not.toBe(opened[1]); // b was closed: a new one is opened
  });

  it('never closes a queue a settle still holds; it goes once released', () => {
    const cache = new QueueCache((name) => new FakeQueue(name), 1);
    const held = cache.acquire('held');
    cache.acquire('other');
    cache.release('other');
    expect(held.closed).toBe(false);
    expect(cache.size).toBe(1);
    const third = cache.acquire('third');
    cache.release('held');
    expect(held.closed).toBe(true);
    expect(third.closed).toBe(false);
  });

  it('closeAll closes every queue', async () => {
    const cache = new QueueCache((name) => new FakeQueue(name), 10);
    const qs = ['x', 'y'].map((n) => cache.acquire(n));
    await cache.closeAll();
    expect(qs.every((q) => q.closed)).toBe(true);
    expect(cache.size).toBe(0);
  });
});
