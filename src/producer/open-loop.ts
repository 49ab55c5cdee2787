import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import type { Producer } from './producer.ts';

/** Publishing ticks: requests due in a tick go out in one publish. */
export const OPEN_LOOP_TICK_MS = 20;

export interface OpenLoopOptions {
  readonly producer: Pick<Producer, 'requestMany'>;
  /** The `seq`-th request (0-based), built when it is due. */
  readonly next: (seq: number) => RequestEnvelope;
  readonly ratePerSecond: number;
  /** Stop sending after this long; undefined: until `stopped()`. */
  readonly durationMs?: number | undefined;
  /** Per request, from its publish. */
  readonly timeoutMs: number;
  /**
   * Requests awaiting a reply at most: past it a due request is not sent and is counted held back,
   * so a fleet that cannot keep up shows as such instead of growing this process without bound.
   */
  readonly maxOutstanding: number;
  /** After sending stops, how long replies still outstanding are waited for. */
  readonly drainMs: number;
  readonly onResult: (result: ResultEnvelope, request: RequestEnvelope) => void;
  readonly onError: (error: FleetError, request: RequestEnvelope) => void;
  /** Requests just held back (see maxOutstanding), as it happens: a run's progress must show it, not only its end. */
  readonly onHeldBack?: (count: number) => void;
  readonly stopped?: () => boolean;
  readonly tickMs?: number;
}

export interface OpenLoopOutcome {
  readonly sent: number;
  /** Due but not sent: maxOutstanding requests were awaiting replies. */
  readonly heldBack: number;
  /** Still without a reply when the drain ended (left to close()). */
  readonly outstanding: number;
}

/**
 * An open-loop load: requests go out at `ratePerSecond` whatever the replies do (a closed loop
 * would slow down with the fleet and hide its queueing), in ticks, each one publish. Every reply,
 * or why there is none, goes to onResult / onError. Resolves when sending has stopped and the
 * replies are in (or drainMs passed).
 */
export function runOpenLoop(o: OpenLoopOptions): Promise<OpenLoopOutcome> {
  const tickMs = o.tickMs ?? OPEN_LOOP_TICK_MS;
  const startedAt = Date.now();
  let sent = 0;
  let heldBack = 0;
  let outstanding = 0;
  let due = 0;
  return new Promise((resolve) => {
    let drainTimer: NodeJS.Timeout | undefined;
    let settledAll: (() => void) | undefined;
    const finish = (): void => {
      clearTimeout(drainTimer);
      resolve({ sent, heldBack, outstanding });
    };
    const send = (): void => {
      const elapsedMs = Date.now() - startedAt;
      const stopped = o.stopped?.() === true;
      const ended = stopped || (o.durationMs !== undefined && elapsedMs >= o.durationMs);
      // Due by the end of this tick, from the start: a tick that ran late sends what it owes, and
      // the last one what the duration owes (a run of R req/s for S s sends R x S).
      const target = stopped ? due : Math.floor((Math.min(elapsedMs + tickMs, o.durationMs ?? Infinity) * o.ratePerSecond) / 1000);
      sendUpTo(target);
      if (ended) {
        clearInterval(tick);
        if (outstanding === 0) return finish();
        settledAll = finish;
        drainTimer = setTimeout(finish, o.drainMs);
      }
    };
    const sendUpTo = (target: number): void => {
      const batch: RequestEnvelope[] = [];
      let held = 0;
      for (; due < target; due++) {
        if (outstanding + batch.length >= o.maxOutstanding) held++;
        else batch.push(o.next(sent + batch.length));
      }
      if (held > 0) {
        heldBack += held;
        o.onHeldBack?.(held);
      }
      if (batch.length === 0) return;
      sent += batch.length;
      outstanding += batch.length;
      const replies = o.producer.requestMany(batch, { timeoutMs: o.timeoutMs });
      replies.forEach((reply, i) => {
        const request = batch[i] as RequestEnvelope;
        reply.then(
          (result) => o.onResult(result, request),
          (err: unknown) => o.onError(FleetError.from(err, 'TRANSPORT_ERROR'), request),
        ).finally(() => {
          outstanding--;
          if (outstanding === 0) settledAll?.();
        });
      });
    };
    const tick = setInterval(send, tickMs);
    send();
  });
}
