import { describe, expect, it } from 'vitest';
import { FLEET_METRICS, fleetSeriesNames } from '../../../src/observability/metric-definitions.ts';

describe('fleet metric definitions', () => {
  it('lists histogram series with their suffixes', () => {
    const names = fleetSeriesNames();
    expect(names).toContain('npu_fleet_end_to_end_latency_seconds_bucket');
    expect(names).toContain('npu_fleet_requests_total');
    expect(names).not.toContain('npu_fleet_end_to_end_latency_seconds');
    expect(names).toHaveLength(Object.values(FLEET_METRICS).reduce((n, d) => n + (d.kind === 'histogram' ? 3 : 1), 0));
  });
});
