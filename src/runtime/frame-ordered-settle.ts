import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { SERVED_STREAMS_MAX } from '../scheduler/stream-served.ts';
import type { AnsweredFrame, Delivery, FrameClaim, NewerFrame, Outcome, SettleOptions, Transport } from '../transport/transport.ts';

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
  /** By stream (model, key): the latest claim of this worker that has it and has not returned yet. */
  private readonly claiming = new Map<string, Promise<void>>();
  /**
   * By stream: the newest frame this worker's claims took (the stream's mark, unless another
   * worker's claim moved it on), so a refusal can say where the newer frame was answered. At most
   * as many streams as the served-frame memory keeps, the least recently claimed forgotten first.
   */
  private readonly claimedHere = new Map<string, string>();

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
    const { newer, release } = await this.inTurn(frames, () => claim.call(this.transport, frames));
    let out = outcomes;
    at.forEach((i, j) => {
      const o = outcomes[i] as Outcome;
      const by = newer[j];
      const frame = frames[j] as AnsweredFrame;
      const stream = streamOf(frame);
      if (by === undefined) {
        this.refused.delete(o.result);
        this.claimedHere.delete(stream);
        this.claimedHere.set(stream, frame.requestId);
        if (this.claimedHere.size > SERVED_STREAMS_MAX) this.claimedHere.delete(this.claimedHere.keys().next().value as string);
        return;
      }
      // Ours: a settle of this worker whose publish failed and was retried after a later one.
      const result = supersededResult(o.result, frame, by, this.claimedHere.get(stream) === by.requestId ? 'this' : 'another');
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

  /**
   * `claim`, once the claims of this worker's earlier settles that share a stream with it have
   * returned. Why: a claim waiting for another settle's lease on one of its streams changes nothing
   * meanwhile, so a later settle of this same worker with a newer frame of another of its streams
   * claimed that stream first, and the older frame, served first, was answered SUPERSEDED "(on
   * another worker)": one worker, `frames` at 8 cameras x 50 fps, 0, 17 and 8 frames in 3 runs
   * (4 cameras: 1 in 9 runs), each overtaken claim having waited 56-229 ms for a lease; in turn,
   * 0 in 11 runs. The later claim now finds the stream leased to the earlier settle and waits for
   * its publish, a few ms. Claims of other streams do not wait.
   */
  private inTurn(frames: readonly AnsweredFrame[], claim: () => Promise<FrameClaim>): Promise<FrameClaim> {
    const streams = [...new Set(frames.map(streamOf))];
    const before = streams.map((s) => this.claiming.get(s)).filter((p) => p !== undefined);
    const mine = before.length === 0 ? claim() : Promise.all(before).then(claim);
    const returned = mine.then(
      () => undefined,
      () => undefined,
    );
    for (const s of streams) this.claiming.set(s, returned);
    void returned.then(() => {
      for (const s of streams) if (this.claiming.get(s) === returned) this.claiming.delete(s);
    });
    return mine;
  }
}

function streamOf(frame: AnsweredFrame): string {
  return `${frame.model}\u0000${frame.streamKey}`;
}

/**
 * `ok` replaced by rejected / SUPERSEDED, in the scheduler's wording (ServedFrames.refusal). The
 * device time and batch stay: it was served, only its answer is withheld.
 */
export function supersededResult(result: ResultEnvelope, frame: AnsweredFrame, newer: NewerFrame, where: 'this' | 'another' = 'another'): ResultEnvelope {
  const { outputs: _outputs, late: _late, ...rest } = result;
  const error = new FleetError(
    'SUPERSEDED',
    `superseded by request ${newer.requestId} of stream "${frame.streamKey}" (createdAt ${newer.frameAt} > ${frame.frameAt}), which was answered first (on ${where} worker): ` +
      'a frame older than one its stream has had answered is not answered ok (model streams.superseded: drop)',
  );
  return { ...rest, status: 'rejected', error: error.toResultError() };
}
