import { vi } from 'vitest';

/**
 * Fakes the worker's clocks (Date and performance.now, no timers): they advance with real time in
 * 1 ms ticks, and `stepWall` steps the wall clock alone, as NTP or a VM resume does. The caller
 * restores real timers (vi.useRealTimers) after `stop`.
 */
export function fakeClocks(): { stepWall(ms: number): void; stop(): void } {
  vi.useFakeTimers({ toFake: ['Date', 'performance'] });
  vi.setSystemTime(Date.now());
  const ticker = setInterval(() => vi.advanceTimersByTime(1), 1);
  return { stepWall: (ms) => vi.setSystemTime(Date.now() + ms), stop: () => clearInterval(ticker) };
}
