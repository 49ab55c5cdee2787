import { describe, expect, it } from 'vitest';
import { DeviceTimeline } from '../../../src/scheduler/device-timeline.ts';

type Event = { at: number; dispatch: number } | { at: number; left: true };

interface Case {
  name: string;
  events: Event[];
  /** freeAt(now, floorMs) read after the events. */
  now: number;
  floorMs?: number;
  freeAt: number;
  overrunning: boolean;
}

const FLOOR_MS = 1;

const cases: Case[] = [
  { name: 'idle: free now', events: [], now: 50, freeAt: 50, overrunning: false },
  { name: 'one batch within its estimate: at its estimated end', events: [{ at: 0, dispatch: 10 }], now: 4, freeAt: 10, overrunning: false },
  { name: 'one batch within the floor of its end: the floor from now', events: [{ at: 0, dispatch: 10 }], now: 9.5, freeAt: 10.5, overrunning: false },
  { name: 'a batch at its estimated end, not left: the floor from now', events: [{ at: 0, dispatch: 10 }], now: 10, freeAt: 11, overrunning: true },
  { name: 'overran by 3 ms: 3 ms from now', events: [{ at: 0, dispatch: 10 }], now: 13, freeAt: 16, overrunning: true },
  { name: 'overran by 50 ms: one estimate from now at most', events: [{ at: 0, dispatch: 10 }], now: 60, freeAt: 70, overrunning: true },
  { name: 'overran with a larger floor: the floor', events: [{ at: 0, dispatch: 10 }], now: 11, floorMs: 4, freeAt: 15, overrunning: true },
  { name: 'two in flight: the second after the first', events: [{ at: 0, dispatch: 10 }, { at: 2, dispatch: 6 }], now: 5, freeAt: 16, overrunning: false },
  {
    name: 'two in flight, the first overran by 20 ms: its projected end plus the second',
    events: [{ at: 0, dispatch: 10 }, { at: 2, dispatch: 6 }],
    now: 30,
    freeAt: 46,
    overrunning: true,
  },
  {
    name: 'dispatched behind an overrunning batch: behind its projected end, not now + its own estimate',
    events: [{ at: 0, dispatch: 10 }, { at: 25, dispatch: 6 }],
    now: 25,
    freeAt: 41,
    overrunning: true,
  },
  { name: 'the first left late: the second starts then', events: [{ at: 0, dispatch: 10 }, { at: 2, dispatch: 6 }, { at: 30, left: true }], now: 31, freeAt: 36, overrunning: false },
  { name: 'all left: free now', events: [{ at: 0, dispatch: 10 }, { at: 12, left: true }], now: 13, freeAt: 13, overrunning: false },
  { name: 'dispatched on a device idle again: from the dispatch', events: [{ at: 0, dispatch: 10 }, { at: 12, left: true }, { at: 40, dispatch: 5 }], now: 41, freeAt: 45, overrunning: false },
];

describe('DeviceTimeline', () => {
  it.each(cases)('$name', ({ events, now, floorMs, freeAt, overrunning }) => {
    const t = new DeviceTimeline();
    for (const e of events) {
      if ('dispatch' in e) t.dispatched(e.dispatch, e.at);
      else t.left(e.at);
    }
    expect(t.freeAt(now, floorMs ?? FLOOR_MS)).toBe(freeAt);
    expect(t.overrunning(now)).toBe(overrunning);
  });

  it('never has a busy device free before now + floor, however long its batch overruns', () => {
    const t = new DeviceTimeline();
    t.dispatched(10, 0);
    for (let now = 0; now <= 1000; now += 7) {
      expect(t.freeAt(now, FLOOR_MS)).toBeGreaterThanOrEqual(now + FLOOR_MS);
      expect(t.freeAt(now, FLOOR_MS)).toBeLessThanOrEqual(Math.max(10, now + 10));
    }
  });
});
