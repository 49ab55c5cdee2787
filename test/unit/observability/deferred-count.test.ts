import { Counter, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { deferredCounter } from '../../../src/observability/deferred-count.ts';

function setUp() {
  const registry = new Registry();
  const { counter, series } = deferredCounter<'model' | 'status'>(
    (collect) => new Counter({ name: 't_requests_total', help: 'h', labelNames: ['model', 'status'], registers: [registry], collect }),
  );
  return { registry, counter, series };
}

describe('DeferredCount', () => {
  it('counts reach the exposition when it is read, once each, and add up across reads', async () => {
    const { registry, series } = setUp();
    const ok = series({ model: 'm', status: 'ok' });
    const expired = series({ model: 'm', status: 'expired' });
    for (let i = 0; i < 5; i++) ok.inc();
    expired.inc();
    const first = await registry.metrics();
    expect(first).toContain('t_requests_total{model="m",status="ok"} 5');
    expect(first).toContain('t_requests_total{model="m",status="expired"} 1');
    // A second read without increments: the same totals, not doubled.
    expect(await registry.metrics()).toContain('t_requests_total{model="m",status="ok"} 5');
    ok.inc();
    ok.inc();
    expect(await registry.metrics()).toContain('t_requests_total{model="m",status="ok"} 7');
  });

  it("reads through the counter's own get() see the counts too", async () => {
    const { counter, series } = setUp();
    series({ model: 'a', status: 'ok' }).inc();
    const got = await counter.get();
    expect(got.values).toEqual([{ labels: { model: 'a', status: 'ok' }, value: 1 }]);
  });

  it('a series never incremented is not exposed', async () => {
    const { registry, series } = setUp();
    series({ model: 'm', status: 'failed' });
    expect(await registry.metrics()).not.toContain('status="failed"');
  });
});
