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

/**
 * A timeline the clock reads from, where the reading thread can be preempted between its reads of
 * the two clocks (a loaded 2-core host: 7-9 ms, seen as 39-112 false "steps" of ±7-10 ms in pairs
 * over a 10-minute soak). `stall` ms pass right after the next read of the clock it names.
 */
function preemptibleSource(): { source: { wallMs: () => number; monoMs: () => number }; advance: (ms: number) => void; stallAfter: (clock: 'wall' | 'mono', ms: number) => void } {
  let t = 0;
  let stall: { clock: 'wall' | 'mono'; ms: number } | undefined;
  const read = (clock: 'wall' | 'mono', value: number): number => {
    if (stall?.clock === clock) {
      t += stall.ms;
      stall = undefined;
    }
    return value;
  };
  return {
    source: { wallMs: () => read('wall', 1_000_000 + Math.floor(t)), monoMs: () => read('mono', t) },
    advance: (ms) => (t += ms),
    stallAfter: (clock, ms) => (stall = { clock, ms }),
  };
}

describe('WorkerClock, preempted between its reads of the two clocks', () => {
  it.each(['wall', 'mono'] as const)('a stall of 8 ms right after a %s read is no step', (clock) => {
    const { source, advance, stallAfter } = preemptibleSource();
    const reported: number[] = [];
    const wallClock = new WorkerClock((stepMs) => reported.push(stepMs), source);
    wallClock.nowMs();
    for (let i = 0; i < 20; i++) {
      advance(10);
      if (i % 3 === 0) stallAfter(clock, 8);
      wallClock.nowMs();
    }
    expect(reported).toEqual([]);
  });

  it('a real step seen by a preempted reading is still reported, once, before a reading past it is returned', () => {
    const { source, advance, stallAfter } = preemptibleSource();
    const events: string[] = [];
    let stepBy = 0;
    const wallClock = new WorkerClock((stepMs) => events.push(`step ${Math.round(stepMs)}`), {
      wallMs: () => source.wallMs() + stepBy,
      monoMs: source.monoMs,
    });
    wallClock.nowMs();
    advance(10);
    stepBy = -2000;
    stallAfter('wall', 8);
    events.push(`read ${wallClock.nowMs() - 1_000_000}`);
    advance(10);
    events.push(`read ${wallClock.nowMs() - 1_000_000}`);
    expect(events[0]).toBe('step -2000');
    expect(events.filter((e) => e.startsWith('step'))).toHaveLength(1);
  });
});
