import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import type { AnsweredFrame, Delivery, NewerFrame, Outcome, SettleOptions, Transport } from '../transport/transport.ts';

/**
 * A worker's settles with the fleet-wide frame order check (Transport.claimNewestFrames) in front:
 * the `ok` results of stream frames (model streams.superseded: drop) are claimed as their stream's
 * newest answered frame right before they are published, and one older than a frame of its
 * stream another worker answered already is answered `rejected` / SUPERSEDED instead, as the
 * scheduler answers a frame older than one it served. Checked at settle time, not when the batch
 * leaves the device: what a consumer sees is the order results reach the broker, so the window
 * left between check and publish is one Redis round trip. The scheduler stays pure and the
 * runtime transport-agnostic; a transport without the method (Kafka, memory) settles as is.
 * JS thread only.
 */
export class FrameOrderedSettle {
  /** Frames whose `ok` results are checked, by delivery (a request's riding duplicates too). */
  private readonly frames = new WeakMap<Delivery, AnsweredFrame>();
  /** What an `ok` result was answered as, when the check refused it. */
  private readonly refused = new WeakMap<ResultEnvelope, ResultEnvelope>();

  constructor(private readonly transport: Pick<Transport, 'settle' | 'claimNewestFrames'>) {}

  /** Whether the transport checks the order at all: else the worker settles with the transport itself. */
  get checks(): boolean {
    return this.transport.claimNewestFrames !== undefined;
  }

  /** `delivery`'s result, if `ok`, is checked as `frame` when settled. */
  note(delivery: Delivery, frame: AnsweredFrame): void {
    this.frames.set(delivery, frame);
  }

  /** What `result` went out as: itself, or the superseded answer that replaced it. */
  answeredAs(result: ResultEnvelope): ResultEnvelope {
    return this.refused.get(result) ?? result;
  }

  /**
   * The transport's settle, frames older than their stream's newest answered replaced. Run again
   * on each retry of a settle: a frame claimed by an attempt that failed is a tie the next time.
   */
  async settle(outcomes: readonly Outcome[], options?: SettleOptions): Promise<void> {
    const at: number[] = [];
    const frames: AnsweredFrame[] = [];
    outcomes.forEach((o, i) => {
      const frame = o.result.status === 'ok' ? this.frames.get(o.delivery) : undefined;
      if (frame === undefined) return;
      at.push(i);
      frames.push(frame);
    });
    const claim = this.transport.claimNewestFrames;
    if (frames.length === 0 || claim === undefined) return this.transport.settle(outcomes, options);
    const { newer, release } = await claim.call(this.transport, frames);
    let out = outcomes;
    at.forEach((i, j) => {
      const o = outcomes[i] as Outcome;
      const by = newer[j];
      if (by === undefined) {
        this.refused.delete(o.result);
        return;
      }
      const result = supersededResult(o.result, frames[j] as AnsweredFrame, by);
      this.refused.set(o.result, result);
      if (out === outcomes) out = [...outcomes];
      (out as Outcome[])[i] = { ...o, result };
    });
    try {
      await this.transport.settle(out, options);
    } finally {
      release();
    }
  }
}

/**
 * `ok` replaced by rejected / SUPERSEDED, in the scheduler's wording (ServedFrames.refusal). The
 * device time and batch stay: it was served, only its answer is withheld.
 */
export function supersededResult(result: ResultEnvelope, frame: AnsweredFrame, newer: NewerFrame): ResultEnvelope {
  const { outputs: _outputs, late: _late, ...rest } = result;
  const error = new FleetError(
    'SUPERSEDED',
    `superseded by request ${newer.requestId} of stream "${frame.streamKey}" (createdAt ${newer.frameAt} > ${frame.frameAt}), which was answered first (on another worker): ` +
      'a frame older than one its stream has had answered is not answered ok (model streams.superseded: drop)',
  );
  return { ...rest, status: 'rejected', error: error.toResultError() };
}
