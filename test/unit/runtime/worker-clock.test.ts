import { describe, expect, it } from 'vitest';
import { CLOCK_STEP_TOLERANCE_MS, WorkerClock } from '../../../src/runtime/worker-clock.ts';

/** Readings as [wall, mono] pairs; the steps reported after each. */
const cases: Array<{ name: string; readings: Array<[number, number]>; steps: number[] }> = [
  { name: 'both clocks advance together: no step', readings: [[1000, 0], [1010, 10], [5010, 4010]], steps: [] },
  { name: 'Date.now() rounding within the tolerance: no step', readings: [[1000, 0.9], [1010, 10.1], [1020, 19.2]], steps: [] },
  { name: 'the wall clock steps back 2 s', readings: [[1000, 0], [-990, 10]], steps: [-2000] },
  { name: 'the wall clock steps forward 1 min (VM resume)', readings: [[1000, 0], [61_010, 10]], steps: [60_000] },
  { name: 'the wall clock stands still while time passes: a step back', readings: [[1000, 0], [1000, 50]], steps: [-50] },
  { name: 'two steps, each reported once', readings: [[1000, 0], [900, 0], [900, 0], [1900, 0]], steps: [-100, 1000] },
  { name: 'just past the tolerance', readings: [[1000, 0], [1000 - CLOCK_STEP_TOLERANCE_MS - 1, 0]], steps: [-CLOCK_STEP_TOLERANCE_MS - 1] },
];

describe('WorkerClock', () => {
  it.each(cases)('$name', ({ readings, steps }) => {
    let i = 0;
    const reported: number[] = [];
    const clock = new WorkerClock((stepMs) => reported.push(stepMs), {
      wallMs: () => (readings[i] as [number, number])[0],
      monoMs: () => (readings[i] as [number, number])[1],
    });
    for (; i < readings.length; i++) expect(clock.nowMs()).toBe((readings[i] as [number, number])[0]);
    expect(reported).toEqual(steps);
  });

  it('reports a step before it returns the reading that saw it', () => {
    const order: string[] = [];
    let wall = 1000;
    const clock = new WorkerClock(() => order.push('step'), { wallMs: () => wall, monoMs: () => 0 });
    clock.nowMs();
    wall = 0;
    order.push(`read ${clock.nowMs()}`);
    expect(order).toEqual(['step', 'read 0']);
  });
});
