import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { LocalHistogram } from '../../../src/observability/local-histogram.ts';

const BUCKETS = [0.001, 0.005, 0.025, 0.1, 1];

/** The same observations into prom-client's Histogram and ours, each in its own registry. */
async function both(observations: Array<[{ model: string; priority: string }, number]>, defaultLabels?: Record<string, string>) {
  const theirs = new Registry();
  const ours = new Registry();
  if (defaultLabels) {
    theirs.setDefaultLabels(defaultLabels);
    ours.setDefaultLabels(defaultLabels);
  }
  const ref = new Histogram({ name: 'h_seconds', help: 'help text', labelNames: ['model', 'priority'], buckets: BUCKETS, registers: [theirs] });
  const local = new LocalHistogram<'model' | 'priority'>('h_seconds', 'help text', ['model', 'priority'], BUCKETS, ours);
  for (const [labels, v] of observations) {
    ref.observe(labels, v);
    local.labels(labels).observe(v);
  }
  return { theirs, ours, local };
}

describe('LocalHistogram', () => {
  const obs: Array<[{ model: string; priority: string }, number]> = [
    [{ model: 'a', priority: '0' }, 0.0005],
    [{ model: 'a', priority: '0' }, 0.001], // on a bound: counted in it (le)
    [{ model: 'a', priority: '0' }, 0.07],
    [{ model: 'a', priority: '0' }, 3], // past the last bound: +Inf only
    [{ model: 'b', priority: '2' }, 0.02],
  ];

  it("exposes exactly what prom-client's Histogram exposes for the same observations, default labels included", async () => {
    const { theirs, ours } = await both(obs, { worker: 'device-0' });
    expect(await ours.metrics()).toBe(await theirs.metrics());
    // JSON too, but for prom-client's exemplar slots (always empty here).
    const noExemplars = (ms: Awaited<ReturnType<Registry['getMetricsAsJSON']>>) =>
      ms.map((m) => ({ ...m, values: m.values.map((v) => Object.fromEntries(Object.entries(v).filter(([k]) => k !== 'exemplar'))) }));
    expect(await ours.getMetricsAsJSON()).toEqual(noExemplars(await theirs.getMetricsAsJSON()));
  });

  it('resets to zero with the registry, keeping its series', async () => {
    const { theirs, ours } = await both(obs);
    theirs.resetMetrics();
    ours.resetMetrics();
    const text = await ours.metrics();
    expect(text).toMatch(/h_seconds_count\{model="a",priority="0"\} 0/);
    expect(text).toMatch(/h_seconds_sum\{model="b",priority="2"\} 0/);
  });

  it('ignores a value that is not finite instead of poisoning the sum', async () => {
    const { ours, local } = await both([]);
    local.labels({ model: 'a', priority: '1' }).observe(Number.NaN);
    local.labels({ model: 'a', priority: '1' }).observe(0.002);
    const text = await ours.metrics();
    expect(text).toMatch(/h_seconds_sum\{model="a",priority="1"\} 0.002/);
    expect(text).toMatch(/h_seconds_count\{model="a",priority="1"\} 1/);
  });
});
