/**
 * What KafkaTransport watches of its result producer for readiness (Transport.connected()). The
 * consumer can be in contact with its group coordinator while the leaders of the reply topics'
 * partitions are unreachable (another broker of the cluster): the worker then keeps reading
 * requests it cannot answer. Timestamps are taken when a send (or an exactly-once transaction)
 * starts and ends, nothing runs in between; JS thread only.
 *
 * A failing streak starts with the first attempt that no success has followed. The producer is
 * not delivering once such a streak is older than the window while it is still trying: an
 * attempt is in flight (kafkajs retrying an unreachable leader holds one for up to its whole
 * retry budget), or one failed within the window (the runtime retries a failed settle after at
 * most 5 s). A producer with nothing to send never fails, and a streak nobody continues for a
 * window is dropped: stale evidence, and the next attempt starts a streak of its own.
 */
export class ProducerWatch {
  private inFlight = 0;
  /** Start of the oldest attempt no success has followed; undefined: none. */
  private unansweredSince: number | undefined;
  private lastFailureAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly windowMs: number) {}

  onAttempt(nowMs = Date.now()): void {
    if (this.unansweredSince === undefined || !this.trying(nowMs)) this.unansweredSince = nowMs;
    this.inFlight++;
  }

  onSuccess(nowMs = Date.now()): void {
    this.inFlight = Math.max(0, this.inFlight - 1);
    // Attempts still in flight started before this success: their streak starts now.
    this.unansweredSince = this.inFlight > 0 ? nowMs : undefined;
  }

  onFailure(nowMs = Date.now()): void {
    this.inFlight = Math.max(0, this.inFlight - 1);
    this.lastFailureAt = nowMs;
  }

  /** False while attempts have gone without a success for longer than the window. */
  delivering(nowMs = Date.now()): boolean {
    if (this.unansweredSince === undefined || nowMs - this.unansweredSince <= this.windowMs) return true;
    return !this.trying(nowMs);
  }

  private trying(nowMs: number): boolean {
    return this.inFlight > 0 || nowMs - this.lastFailureAt <= this.windowMs;
  }
}
