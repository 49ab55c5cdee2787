/** The longest delay setTimeout takes (2^31 − 1 ms, about 24.8 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * `ms` as a setTimeout delay. Node fires a longer timer after 1 ms (with a TimeoutOverflowWarning),
 * so a limit or a wake further out than the cap waits the cap instead: practically never.
 */
export const timerDelayMs = (ms: number): number => Math.min(MAX_TIMER_MS, Math.max(0, ms));
