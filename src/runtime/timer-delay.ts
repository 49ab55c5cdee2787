/** The longest delay setTimeout takes (2^31 − 1 ms, about 24.8 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * `ms` as a setTimeout delay. Node fires a longer timer after 1 ms (with a TimeoutOverflowWarning),
 * so a limit or a wake further out than the cap waits the cap instead: practically never.
 */
export const timerDelayMs = (ms: number): number => Math.min(MAX_TIMER_MS, Math.max(0, ms));

/**
 * How much before the last moment the worker releases a batch for a deadline (the scheduler's
 * deadlineMarginMs): its wake-up is a timer, which on a busy event loop fires a few ms late. With
 * 1 ms, 40-50% of low-priority requests due 12 ms out (a 1.2 ms device) were expired.
 */
export const WAKE_MARGIN_MS = 5;
