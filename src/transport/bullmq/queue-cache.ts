/**
 * Reply queues by name, least recently used first, keeping at most `max` of them once idle.
 *
 * Why: a worker answers on whatever queue each request names, and every request() client has its
 * own inbox queue, so a plain cache grows by one BullMQ Queue (≈ 6 KB of heap and three listeners
 * on the shared Redis connection, measured) per client for the life of the worker. A queue in use
 * by a settle is never closed under it. JS thread only.
 */
export class QueueCache<Q extends { close(): Promise<void> }> {
  private readonly entries = new Map<string, { readonly queue: Q; users: number }>();

  constructor(
    private readonly open: (name: string) => Q,
    private readonly max = 256,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  /** The queue for `name`, opened if needed, held until `release(name)`. */
  acquire(name: string): Q {
    let entry = this.entries.get(name);
    if (entry === undefined) entry = { queue: this.open(name), users: 0 };
    else this.entries.delete(name); // re-inserted below: most recently used last
    entry.users++;
    this.entries.set(name, entry);
    return entry.queue;
  }

  release(name: string): void {
    const entry = this.entries.get(name);
    if (entry !== undefined && entry.users > 0) entry.users--;
    this.trim();
  }

  private trim(): void {
    for (const [name, entry] of this.entries) {
      if (this.entries.size <= this.max) return;
      if (entry.users > 0) continue;
      this.entries.delete(name);
      // Closing a Queue on a shared connection only drops its listeners; nothing to wait for.
      void entry.queue.close().catch(() => undefined);
    }
  }

  async closeAll(): Promise<void> {
    const queues = [...this.entries.values()].map((e) => e.queue);
    this.entries.clear();
    await Promise.allSettled(queues.map((q) => q.close()));
  }
}
