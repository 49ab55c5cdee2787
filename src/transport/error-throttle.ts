/**
 * One log line per `everyMs` for a stream of like errors, carrying the count of those it held
 * back: BullMQ emits an error event per failed fetch, and retries a fetch Redis refused at once,
 * so an out-of-memory Redis meant thousands of identical lines a second; a Kafka worker meets a
 * client's gone inbox once per result. JS thread only.
 */
export class ErrorThrottle {
  private loggedAt = -Infinity;
  private held = 0;

  constructor(private readonly everyMs = 10_000) {}

  /** Whether to log this one now and, if so, how many were held back since the last line. */
  note(nowMs: number): { readonly log: boolean; readonly heldBack: number } {
    if (nowMs - this.loggedAt < this.everyMs) {
      this.held++;
      return { log: false, heldBack: 0 };
    }
    const heldBack = this.held;
    this.loggedAt = nowMs;
    this.held = 0;
    return { log: true, heldBack };
  }
}
