import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';

/** setTimeout's ceiling (about 24.8 days): Node fires a longer delay, or Infinity, after 1 ms. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A request's `timeoutMs` as a timer delay: NaN, 0 or a negative (an unset env var, a typo) would
 * time every request out at once as "no reply within NaN ms", and one past setTimeout's ceiling
 * (Infinity for "no limit") too; the former is refused naming the field, the latter capped.
 */
export function timerMs(timeoutMs: number): number {
  if (typeof timeoutMs !== 'number' || Number.isNaN(timeoutMs) || timeoutMs <= 0) {
    throw new FleetError('INVALID_ARGUMENT', `timeoutMs must be a positive number of milliseconds (Infinity: wait for good), got ${String(timeoutMs)}; nothing was published`, {
      details: { field: 'timeoutMs' },
    });
  }
  return Math.min(timeoutMs, MAX_TIMER_MS);
}

/**
 * `count` promises rejected with `error`, for a requestMany() refused as a whole. Each is marked
 * handled, as the replies of roundTripMany are: a caller awaiting only some of them must not have
 * the process ended by an unhandled rejection of another.
 */
export function refuseAll(count: number, error: FleetError): Array<Promise<ResultEnvelope>> {
  return Array.from({ length: count }, () => {
    const refused = Promise.reject(error);
    refused.catch(() => undefined);
    return refused;
  });
}

interface Pending {
  readonly resolve: (result: ResultEnvelope) => void;
  readonly reject: (error: FleetError) => void;
  readonly timer: NodeJS.Timeout;
}

/** Correlates replies arriving on a producer's inbox with the requests waiting for them. */
export class ReplyRouter {
  private readonly pending = new Map<string, Pending>();
  /** Replies for ids nobody waits for (late after a timeout, or duplicates after redelivery). */
  unmatched = 0;

  /**
   * `howToCheck(model)`: how to see whether any worker reads the model's topic or queue, named by
   * a TIMEOUT: a request for a model no fleet serves (a typo, a model not deployed) only times out.
   */
  constructor(private readonly howToCheck: (model: string) => string = () => 'that its workers are up') {}

  /**
   * Request-and-await-reply shared by every producer: register first (a fast reply must not
   * arrive unclaimed), publish with the reply address, fail the wait if the publish fails.
   * `statedMs`: the timeoutMs a TIMEOUT names, when the caller's was `timeoutMs` plus time spent
   * before (opening the inbox): naming the rest ("within 3749 ms" for 4000) misled the caller.
   */
  roundTrip(id: string, timeoutMs: number, publish: () => Promise<void>, statedMs = timeoutMs, model?: string): Promise<ResultEnvelope> {
    try {
      timerMs(timeoutMs);
    } catch (err) {
      return Promise.reject(err as FleetError);
    }
    // Refused before anything is sent: its reply could not be told from the waiting one's.
    if (this.pending.has(id)) return this.expect(id, timeoutMs);
    const reply = this.expect(id, timeoutMs, statedMs, model);
    // Handled now, not after the publish: the timeout can fire while the publish is still under
    // way (Redis or Kafka slow to answer), and a rejection nobody handles ends the process.
    reply.catch(() => undefined);
    // Not awaited: the call settles with the reply, its timeout or a failed publish, whichever
    // comes first; a publish that never settles (a broker that went silent) must not hold it.
    let sending: Promise<void>;
    try {
      sending = publish();
    } catch (err) {
      sending = Promise.reject(err as Error);
    }
    sending.catch((err: unknown) => this.fail(id, FleetError.from(err, 'TRANSPORT_ERROR')));
    return reply;
  }

  /**
   * roundTrip for many requests published together (bulk scoring): one publish carries them all,
   * each gets its own reply promise, in the order of `ids`. `publish` is told which of them (by
   * index) are still waiting when it runs: a slow inbox opening may outlast some timeouts, and
   * those are not sent. An id repeated in `ids` or already waiting gets INVALID_ARGUMENT and is
   * not sent: its reply could not be told from the other's.
   */
  roundTripMany(
    ids: readonly string[],
    timeoutMs: number,
    publish: (waiting: (index: number) => boolean) => Promise<void>,
    models?: readonly string[],
  ): Array<Promise<ResultEnvelope>> {
    try {
      timerMs(timeoutMs);
    } catch (err) {
      return refuseAll(ids.length, err as FleetError);
    }
    const registered = new Set<string>();
    const own: boolean[] = [];
    const replies = ids.map((id, i) => {
      const repeat = this.pending.has(id) || registered.has(id);
      own.push(!repeat);
      registered.add(id);
      const reply = repeat ? this.refuseRepeat(id) : this.expect(id, timeoutMs, timeoutMs, models?.[i]);
      // Handled now: a timeout can fire while the publish is still under way.
      reply.catch(() => undefined);
      return reply;
    });
    const waiting = (index: number): boolean => own[index] === true && this.pending.has(ids[index] as string);
    publish(waiting).catch((err: unknown) => {
      const error = FleetError.from(err, 'TRANSPORT_ERROR');
      ids.forEach((id, i) => {
        if (own[i] === true) this.fail(id, error);
      });
    });
    return replies;
  }

  /** Whether a reply for `id` is awaited. */
  isWaiting(id: string): boolean {
    return this.pending.has(id);
  }

  get waiting(): number {
    return this.pending.size;
  }

  /** Registers before publishing so a fast reply cannot arrive unclaimed. `model`: named by its TIMEOUT. */
  expect(id: string, timeoutMs: number, statedMs = timeoutMs, model?: string): Promise<ResultEnvelope> {
    if (this.pending.has(id)) return this.refuseRepeat(id);
    return new Promise<ResultEnvelope>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(this.timeout(id, statedMs, model));
      }, timerMs(timeoutMs));
      this.pending.set(id, { resolve, reject, timer });
    });
  }

  private timeout(id: string, statedMs: number, model: string | undefined): FleetError {
    const why =
      model === undefined
        ? ''
        : `: the fleet may be backed up (raise timeoutMs), or no worker may serve model "${model}" (check that the fleet config's models lists it and ${this.howToCheck(model)})`;
    return new FleetError('TIMEOUT', `no reply for request "${id}" within ${statedMs} ms${why}`, {
      details: { id, timeoutMs: statedMs, ...(model === undefined ? {} : { model }) },
    });
  }

  private refuseRepeat(id: string): Promise<never> {
    return Promise.reject(
      new FleetError('INVALID_ARGUMENT', `a request with id "${id}" is already awaiting its reply on this producer; ids must be unique`, {
        details: { id },
      }),
    );
  }

  deliver(result: ResultEnvelope): void {
    const p = this.pending.get(result.id);
    if (p === undefined) {
      this.unmatched++;
      return;
    }
    this.pending.delete(result.id);
    clearTimeout(p.timer);
    p.resolve(result);
  }

  /** Fails one waiter (its publish failed). */
  fail(id: string, error: FleetError): void {
    const p = this.pending.get(id);
    if (p === undefined) return;
    this.pending.delete(id);
    clearTimeout(p.timer);
    p.reject(error);
  }

  failAll(error: FleetError): void {
    for (const id of [...this.pending.keys()]) this.fail(id, error);
  }
}
