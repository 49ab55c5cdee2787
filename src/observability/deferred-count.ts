import type { Counter, LabelValues } from 'prom-client';

/**
 * One label set of a prom-client Counter counted per request: increments add up here and reach the
 * counter when it is read (its `collect`, which prom-client runs before every scrape or get()).
 * prom-client's child inc() hashes and validates the label object on every call, about 0.7 µs,
 * paid thousands of times a second on the worker's JavaScript thread; this is an add.
 * JS thread only.
 */
export class DeferredCount<L extends string> {
  private pending = 0;

  constructor(private readonly labels: LabelValues<L>) {}

  inc(): void {
    this.pending++;
  }

  /** Hands what was counted since the last read to `counter`. */
  flushTo(counter: Counter<L>): void {
    if (this.pending === 0) return;
    counter.inc(this.labels, this.pending);
    this.pending = 0;
  }
}

/** A Counter whose per-request series are DeferredCounts, flushed when the counter is read. */
export function deferredCounter<L extends string>(
  make: (collect: () => void) => Counter<L>,
): { counter: Counter<L>; series: (labels: LabelValues<L>) => DeferredCount<L> } {
  const all: Array<DeferredCount<L>> = [];
  const counter: Counter<L> = make(() => {
    for (const s of all) s.flushTo(counter);
  });
  return {
    counter,
    series: (labels) => {
      const s = new DeferredCount<L>(labels);
      all.push(s);
      return s;
    },
  };
}
