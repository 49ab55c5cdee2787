import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../../../src/errors/fleet-error.ts';
import { FLEET_METRICS, fleetSeriesNames, isUnserved, unservedCodeLabel } from '../../../src/observability/metric-definitions.ts';

describe('fleet metric definitions', () => {
  it('lists histogram series with their suffixes', () => {
    const names = fleetSeriesNames();
    expect(names).toContain('npu_fleet_end_to_end_latency_seconds_bucket');
    expect(names).toContain('npu_fleet_requests_total');
    expect(names).not.toContain('npu_fleet_end_to_end_latency_seconds');
    expect(names).toHaveLength(Object.values(FLEET_METRICS).reduce((n, d) => n + (d.kind === 'histogram' ? 3 : 1), 0));
  });

  it('maps a result error code to a code label: FleetError codes as they are, anything else OTHER', () => {
    for (const code of Object.keys(ERROR_CODES)) expect(unservedCodeLabel(code)).toBe(code);
    // OTHER must not be a FleetError code itself, or the two would share a series.
    expect(Object.keys(ERROR_CODES)).not.toContain('OTHER');
    for (const code of [undefined, '', 'OTHER', 'queue_full', 'QUEUE_FULL ', 'toString', '__proto__', 'hasOwnProperty']) {
      expect(unservedCodeLabel(code), String(code)).toBe('OTHER');
    }
  });

  it('counts as unserved every status but ok and late', () => {
    expect((['ok', 'late', 'expired', 'rejected', 'invalid', 'failed'] as const).filter(isUnserved)).toEqual(['expired', 'rejected', 'invalid', 'failed']);
  });
});
