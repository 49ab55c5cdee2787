import type { Gauge } from 'prom-client';

/**
 * A gauge whose label sets each reading of its source lists in full (the per-model gauges read on
 * every scrape): a label set the latest reading no longer lists is removed from the gauge. Set one
 * by one, the series of a model unloaded in a hot reload would report its last value forever.
 */
export class ListedGauge<L extends string> {
  private listed = new Map<string, Record<L, string>>();

  constructor(private readonly gauge: Gauge<L>) {}

  /** The whole reading. Values of one label set add up (two priority levels both labelled "other"). */
  replace(readings: Iterable<readonly [Record<L, string>, number]>): void {
    const next = new Map<string, { labels: Record<L, string>; value: number }>();
    for (const [labels, value] of readings) {
      const key = labelKey(labels);
      const have = next.get(key);
      if (have) have.value += value;
      else next.set(key, { labels, value });
    }
    for (const [key, labels] of this.listed) if (!next.has(key)) this.gauge.remove(labels);
    this.listed = new Map();
    for (const [key, { labels, value }] of next) {
      this.gauge.set(labels, value);
      this.listed.set(key, labels);
    }
  }

  /** The registry was reset: the gauge holds no label set any more. */
  cleared(): void {
    this.listed.clear();
  }
}

function labelKey(labels: Readonly<Record<string, string>>): string {
  return Object.keys(labels)
    .sort()
    .map((k) => `${k}\u0000${labels[k]}`)
    .join('\u0001');
}
