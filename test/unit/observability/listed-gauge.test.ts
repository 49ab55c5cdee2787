import { Gauge, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { ListedGauge } from '../../../src/observability/listed-gauge.ts';

async function values(g: Gauge<'model' | 'level'>): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const v of (await g.get()).values) out[`${v.labels.model}/${v.labels.level}`] = v.value;
  return out;
}

describe('ListedGauge', () => {
  it('keeps exactly the label sets of the latest reading, adding up repeats within one reading', async () => {
    const registry = new Registry();
    const gauge = new Gauge<'model' | 'level'>({ name: 'g', help: 'h', labelNames: ['model', 'level'], registers: [registry] });
    const listed = new ListedGauge(gauge);
    listed.replace([
      [{ model: 'a', level: '0' }, 1],
      [{ model: 'b', level: '0' }, 2],
    ]);
    expect(await values(gauge)).toEqual({ 'a/0': 1, 'b/0': 2 });
    listed.replace([
      [{ level: '1', model: 'a' }, 3],
      [{ model: 'a', level: '1' }, 4],
    ]);
    expect(await values(gauge)).toEqual({ 'a/1': 7 });
    listed.replace([]);
    expect(await values(gauge)).toEqual({});
    listed.replace([[{ model: 'c', level: '0' }, 5]]);
    registry.resetMetrics();
    listed.cleared();
    listed.replace([[{ model: 'd', level: '0' }, 6]]);
    expect(await values(gauge)).toEqual({ 'd/0': 6 });
  });
});
