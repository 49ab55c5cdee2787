import type { Redis } from 'ioredis';

/**
 * How long a job's handover waits at most for an earlier-popped job that has not reached the
 * processor. Such a job is normally there within microseconds to a few Redis round trips (BullMQ
 * takes the jobs its loop fetched in a row before those a completion fetched); one that never comes
 * (BullMQ failing it after the pop) must not hold the queue's results for good.
 */
export const POP_GAP_MAX_MS = 1_000;

type Command = Parameters<Redis['sendCommand']>[0];

/**
 * The job a reply to BullMQ's moveToActive / moveToFinished(fetchNext) script gave this worker:
 * `[jobHash as a flat array, jobId, rateLimitDelay, delayUntil]`; anything else is not a pop.
 */
export function poppedJobId(reply: unknown): string | undefined {
  if (!Array.isArray(reply) || reply.length < 2) return undefined;
  const [hash, id] = reply as unknown[];
  if (!Array.isArray(hash) || hash.length === 0 || hash.length % 2 !== 0) return undefined;
  if (typeof id === 'string') return id;
  return Buffer.isBuffer(id) ? id.toString('utf8') : undefined;
}

/**
 * Hands a BullMQ reply worker's jobs to the caller in the order Redis popped them off the queue,
 * which is the order they were added to it (one consumer; several share a queue's jobs between
 * them, each in its own order).
 *
 * Why: a worker with concurrency > 1 fetches jobs in two ways, in its loop (moveToActive) and as
 * each job completes (moveToFinished with fetchNext), on one connection; Redis pops them in the
 * order the commands reach it, but the two promise chains have different lengths, so a job popped
 * by a completion reached the processor after one popped later by the loop: a camera's `ok` frame
 * results came out of order (2,000 results added 4 at a time, concurrency 64: 42 inversions;
 * concurrency 1 has none but took 20,000 results at 2,200/s against 5,800/s). The order is read
 * where it is exact: as ioredis resolves each script's reply, in the order the replies arrive,
 * before any promise reaction runs.
 *
 * JS thread only.
 */
export class ReplyPopOrder {
  /** The sequence number the next popped job gets. */
  private popped = 0;
  /** The sequence number handed over next. */
  private due = 0;
  /** Popped jobs not yet at the processor: their sequence numbers (a job popped again has two). */
  private readonly seqOf = new Map<string, number[]>();
  /** Handovers that reached the processor before an earlier-popped job, by sequence number. */
  private readonly ready = new Map<number, () => void>();
  private gapTimer: NodeJS.Timeout | undefined;
  /** The sequence number the gap timer waits for. */
  private gapAt = -1;
  /** Sequence numbers given up on so far (POP_GAP_MAX_MS), for the log and tests. */
  skipped = 0;

  constructor(
    private readonly onGapSkipped: (count: number) => void = () => undefined,
    private readonly gapMaxMs = POP_GAP_MAX_MS,
  ) {}

  /**
   * Reads the pops off `connection` (the worker's own: BullMQ runs its scripts on it): every
   * script reply that hands a job over is numbered as it is parsed. Call before the worker starts.
   */
  watch(connection: Redis): void {
    const send = connection.sendCommand.bind(connection);
    // ioredis passes a command through sendCommand again (offline queue, resend after reconnect).
    const seen = new WeakSet<Command>();
    connection.sendCommand = (command: Command, stream?: Parameters<Redis['sendCommand']>[1]): unknown => {
      if (!seen.has(command) && (command.name === 'evalsha' || command.name === 'eval')) {
        seen.add(command);
        const resolve = command.resolve;
        command.resolve = (reply: unknown) => {
          const id = poppedJobId(reply);
          if (id !== undefined) this.pop(id);
          resolve(reply);
        };
      }
      return send(command, stream);
    };
  }

  /** A job popped off the queue now (exported for tests). */
  pop(jobId: string): void {
    const seqs = this.seqOf.get(jobId);
    if (seqs === undefined) this.seqOf.set(jobId, [this.popped++]);
    else seqs.push(this.popped++);
  }

  /**
   * Runs `hand` once every job popped before `jobId` has been handed over (or given up on after
   * POP_GAP_MAX_MS); resolves once it ran. A job whose pop was not seen runs at once.
   */
  handOver(jobId: string | undefined, hand: () => void): Promise<void> {
    const seq = jobId === undefined ? undefined : this.take(jobId);
    if (seq === undefined) {
      hand();
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      this.ready.set(seq, () => {
        try {
          hand();
          resolve();
        } catch (err) {
          reject(err as Error);
        }
      });
      this.flush();
    });
  }

  /** Handovers still waiting for an earlier pop. */
  get waiting(): number {
    return this.ready.size;
  }

  private take(jobId: string): number | undefined {
    const seqs = this.seqOf.get(jobId);
    const seq = seqs?.shift();
    if (seqs !== undefined && seqs.length === 0) this.seqOf.delete(jobId);
    return seq;
  }

  private flush(): void {
    for (let hand = this.ready.get(this.due); hand !== undefined; hand = this.ready.get(this.due)) {
      this.ready.delete(this.due);
      this.due++;
      hand();
    }
    if (this.ready.size === 0) {
      clearTimeout(this.gapTimer);
      this.gapTimer = undefined;
      return;
    }
    // One timer per gap: handovers arriving behind the same gap must not keep putting it off.
    if (this.gapTimer !== undefined && this.gapAt === this.due) return;
    clearTimeout(this.gapTimer);
    const gapAt = (this.gapAt = this.due);
    this.gapTimer = setTimeout(() => {
      this.gapTimer = undefined;
      if (this.due !== gapAt || this.ready.size === 0) return;
      // Given up on: the earliest handover waiting goes next.
      const next = Math.min(...this.ready.keys());
      const count = next - this.due;
      this.skipped += count;
      for (const [id, seqs] of this.seqOf) {
        const left = seqs.filter((s) => s >= next);
        if (left.length === 0) this.seqOf.delete(id);
        else this.seqOf.set(id, left);
      }
      this.due = next;
      this.onGapSkipped(count);
      this.flush();
    }, this.gapMaxMs);
    this.gapTimer.unref();
  }
}
