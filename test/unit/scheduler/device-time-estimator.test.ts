import { describe, expect, it } from 'vitest';
import { DeviceTimeEstimator } from '../../../src/scheduler/index.ts';

describe('DeviceTimeEstimator', () => {
  it('uses the prior (base + perItem × gear) before any data', () => {
    const e = new DeviceTimeEstimator(0.2, 4, 0.25);
    expect(e.estimateMs(1)).toBe(4.25);
    expect(e.estimateMs(32)).toBe(12);
  });

  it('is an EWMA per gear', () => {
    const e = new DeviceTimeEstimator(0.25, 4, 0.25);
    e.record(8, 10);
    e.record(8, 14);
    expect(e.estimateMs(8)).toBe(11);
    expect(e.snapshot()).toEqual([{ gear: 8, estimateMs: 11, samples: 2 }]);
  });

  it.each([
    { name: 'interpolates between observed gears', gear: 8, expected: 8 },
    { name: 'extends the line past the largest observed gear', gear: 32, expected: 14 },
    { name: 'extends the line below the smallest observed gear', gear: 2, expected: 6.5 },
  ])('$name', ({ gear, expected }) => {
    const e = new DeviceTimeEstimator(1, 100, 100); // a prior far off, to show data wins
    e.record(4, 7); // the line through (4, 7) and (16, 10): 6 + 0.25 × gear
    e.record(16, 10);
    expect(e.estimateMs(gear)).toBeCloseTo(expected, 9);
  });

  it('rescales the prior by one observed gear and keeps estimates monotone', () => {
    const e = new DeviceTimeEstimator(1, 4, 1);
    e.record(4, 4); // prior(4) = 8 → scale 0.5
    expect(e.estimateMs(8)).toBe(6);
    expect(e.estimateMs(1)).toBe(2.5);
  });

  it('ignores negative and non-finite samples', () => {
    const e = new DeviceTimeEstimator(1, 4, 1);
    e.record(1, Number.NaN);
    e.record(1, -3);
    e.record(1, Infinity);
    expect(e.estimateMs(1)).toBe(5);
  });
});
