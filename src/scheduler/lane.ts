import { IndexedHeap } from './indexed-heap.ts';
import type { SchedulerRequest } from './scheduler-types.ts';

/** One queued request plus its positions in its lane's two heaps and the expiry index. */
export interface Entry<P> {
  readonly req: SchedulerRequest<P>;
  readonly level: number;
  readonly bucket: number;
  readonly items: number;
  /** The smallest gear holding `items`: the batch it would run in alone. */
  readonly gear: number;
  readonly bytes: number;
  readonly arrivedAt: number;
  /** Infinity when the request has no deadline. */
  readonly deadline: number;
  /** agedAtFor its arrival: recomputed when agingMs changes (BatchScheduler.reconfigure). */
  agedAt: number;
  readonly seq: number;
  edfPos: number;
  fifoPos: number;
  expiryPos: number;
}

/** When a request of `level` arrived at `arrivedAt` is overdue: (level + 1) × agingMs later; Infinity when aging is off. */
export const agedAtFor = (arrivedAt: number, level: number, agingMs: number | null): number => (agingMs === null ? Infinity : arrivedAt + (level + 1) * agingMs);

/**
 * The queue entry of `req`: its length bucket (the first of `buckets` it fits; 0 without buckets),
 * its gear, and its arrival on the scheduler's step-free clock (`arrivedAt` = the wall-clock arrival
 * minus the clock steps reported so far, so delays and aging count real time).
 */
export function newEntry<P>(req: SchedulerRequest<P>, o: { readonly buckets: readonly number[]; readonly agingMs: number | null }, gearOf: Int32Array, arrivedAt: number, seq: number): Entry<P> {
  let bucket = 0;
  if (o.buckets.length > 0) {
    const length = req.length as number;
    while ((o.buckets[bucket] as number) < length) bucket++;
  }
  const level = req.priority;
  return {
    req,
    level,
    bucket,
    items: req.items,
    gear: gearOf[req.items] as number,
    bytes: req.bytes ?? 0,
    arrivedAt,
    deadline: req.deadlineAt ?? Infinity,
    agedAt: agedAtFor(arrivedAt, level, o.agingMs),
    seq,
    edfPos: -1,
    fifoPos: -1,
    expiryPos: -1,
  };
}

export const edfLess = <P>(a: Entry<P>, b: Entry<P>): boolean =>
  a.deadline < b.deadline || (a.deadline === b.deadline && (a.arrivedAt < b.arrivedAt || (a.arrivedAt === b.arrivedAt && a.seq < b.seq)));
export const fifoLess = <P>(a: Entry<P>, b: Entry<P>): boolean => a.arrivedAt < b.arrivedAt || (a.arrivedAt === b.arrivedAt && a.seq < b.seq);

/** The requests of one (priority level, bucket): deadline order for composition, arrival order for age. */
export class Lane<P> {
  readonly edf = new IndexedHeap<Entry<P>>(edfLess, (e, pos) => (e.edfPos = pos));
  readonly fifo = new IndexedHeap<Entry<P>>(fifoLess, (e, pos) => (e.fifoPos = pos));
  constructor(
    readonly level: number,
    readonly bucket: number,
  ) {}

  /** The lane's best entry at `now`: its oldest if that one is overdue, else its earliest deadline. */
  head(nowMs: number): Entry<P> | undefined {
    const oldest = this.fifo.peek();
    if (oldest === undefined || oldest.agedAt <= nowMs) return oldest;
    return this.edf.peek();
  }
}

/**
 * Composition order at `now`: overdue requests (waited (level + 1) × agingMs) first, oldest-overdue
 * first; then priority level, earliest deadline, arrival.
 */
export function ranksBefore<P>(a: Entry<P>, b: Entry<P>, nowMs: number): boolean {
  const aOverdue = a.agedAt <= nowMs;
  if (aOverdue !== b.agedAt <= nowMs) return aOverdue;
  if (aOverdue) return a.agedAt < b.agedAt || (a.agedAt === b.agedAt && a.seq < b.seq);
  if (a.level !== b.level) return a.level < b.level;
  return edfLess(a, b);
}

/**
 * A batch of one bucket may not take `candidate` while a request in another bucket is ahead of it
 * by class: a higher priority level, or overdue while the candidate is not. Within a class
 * (same level, or both overdue) order across buckets is relaxed: that is what buckets buy, and
 * without it a sustained overload with aging would interleave buckets into one-request batches.
 * Every batch still starts with the overall top request, so an overdue request waits at most for
 * the overdue requests ahead of it.
 */
export function passesOver<P>(candidate: Entry<P>, outside: Entry<P>, nowMs: number): boolean {
  const cOverdue = candidate.agedAt <= nowMs;
  const oOverdue = outside.agedAt <= nowMs;
  if (cOverdue || oOverdue) return oOverdue && !cOverdue;
  return outside.level < candidate.level;
}
