import { ExpiryIndex } from './expiry-index.ts';
import { Lane, agedAtFor, fifoLess, ranksBefore } from './lane.ts';
import type { Entry } from './lane.ts';
import type { SchedulerOptions } from './scheduler-options.ts';

/**
 * The queued requests of one scheduler and every index over them: a lane per (priority level,
 * bucket), the expiry index, the by-id map, and the counts the limits and stats read (items,
 * bytes, per bucket and per level) with the intake pause. It holds no policy: BatchScheduler
 * decides what leaves and when.
 */
export class RequestQueue<P> {
  /** Level-major: lane(level, bucket) = lanes[level × bucketCount + bucket]. */
  readonly lanes: readonly Lane<P>[];
  readonly bucketCount: number;
  private readonly byId = new Map<string, Entry<P>>();
  /**
   * With streamSuperseded 'drop' (else null): the one queued request of each streamKey. Kept in
   * add/remove, the two doors every entry passes (enqueue, dispatch, expiry, trim, cancel, drain),
   * so a key leaves with its request and the map never outgrows the queue. Switched on by a
   * reconfigure, it knows only the requests queued from then on.
   */
  private streams: Map<string, Entry<P>> | null;
  private readonly expiry = new ExpiryIndex<P>();
  private readonly bucketItems: number[];
  private readonly levelRequests: number[];
  private readonly levelItems: number[];
  private itemCount = 0;
  private byteCount = 0;
  private paused = false;

  constructor(private o: SchedulerOptions) {
    this.streams = o.streamSuperseded === 'drop' ? new Map() : null;
    this.bucketCount = Math.max(1, o.buckets.length);
    const lanes: Lane<P>[] = [];
    for (let level = 0; level < o.priorityLevels; level++) {
      for (let bucket = 0; bucket < this.bucketCount; bucket++) lanes.push(new Lane<P>(level, bucket));
    }
    this.lanes = lanes;
    this.bucketItems = new Array<number>(this.bucketCount).fill(0);
    this.levelRequests = new Array<number>(o.priorityLevels).fill(0);
    this.levelItems = new Array<number>(o.priorityLevels).fill(0);
  }

  get size(): number {
    return this.byId.size;
  }

  get items(): number {
    return this.itemCount;
  }

  get bytes(): number {
    return this.byteCount;
  }

  /** True from a soft limit (items or bytes) until both are back at their low watermarks. */
  get intakePaused(): boolean {
    return this.paused;
  }

  has(id: string): boolean {
    return this.byId.has(id);
  }

  get(id: string): Entry<P> | undefined {
    return this.byId.get(id);
  }

  /** Whether a stream's frames supersede each other here (streamSuperseded 'drop'). */
  get tracksStreams(): boolean {
    return this.streams !== null;
  }

  /** The queued request of `streamKey`, when streams are tracked. */
  ofStream(streamKey: string): Entry<P> | undefined {
    return this.streams?.get(streamKey);
  }

  /** Stream keys with a queued request (0 when streams are not tracked). */
  get streamCount(): number {
    return this.streams?.size ?? 0;
  }

  itemsInBucket(bucket: number): number {
    return this.bucketItems[bucket] as number;
  }

  requestsAtLevel(level: number): number {
    return this.levelRequests[level] ?? 0;
  }

  itemsAtLevel(level: number): number {
    return this.levelItems[level] as number;
  }

  /** Arrival of the oldest request queued at `level` (Infinity: none). */
  oldestArrivedAt(level: number): number {
    let oldest = Infinity;
    for (let b = 0; b < this.bucketCount; b++) {
      const head = (this.lanes[level * this.bucketCount + b] as Lane<P>).fifo.peek();
      if (head !== undefined && head.arrivedAt < oldest) oldest = head.arrivedAt;
    }
    return oldest;
  }

  /** Queues `entry` (new, or handed back from a batch); the intake pause is left to the caller. */
  add(entry: Entry<P>): void {
    const lane = this.lanes[entry.level * this.bucketCount + entry.bucket] as Lane<P>;
    lane.edf.push(entry);
    lane.fifo.push(entry);
    this.expiry.add(entry);
    this.byId.set(entry.req.id, entry);
    const streamKey = entry.req.streamKey;
    if (this.streams !== null && streamKey !== undefined) this.streams.set(streamKey, entry);
    this.itemCount += entry.items;
    // remove took its bytes off: without this, a handed-back request's bytes drift out of the
    // count and the byte limits loosen.
    this.byteCount += entry.bytes;
    this.bucketItems[entry.bucket] = (this.bucketItems[entry.bucket] as number) + entry.items;
    this.levelRequests[entry.level] = (this.levelRequests[entry.level] as number) + 1;
    this.levelItems[entry.level] = (this.levelItems[entry.level] as number) + entry.items;
  }

  /** Pauses intake once a soft limit is reached; returns whether intake is paused. */
  pauseAtSoftLimit(): boolean {
    if (this.itemCount >= this.o.softLimitItems || this.byteCount >= this.o.softLimitBytes) this.paused = true;
    return this.paused;
  }

  remove(entry: Entry<P>): void {
    const lane = this.lanes[entry.level * this.bucketCount + entry.bucket] as Lane<P>;
    lane.edf.removeAt(entry.edfPos);
    lane.fifo.removeAt(entry.fifoPos);
    this.expiry.remove(entry);
    this.byId.delete(entry.req.id);
    const streamKey = entry.req.streamKey;
    // Only if it holds the slot: one request per key is BatchScheduler.enqueue's rule, not this class's.
    if (this.streams !== null && streamKey !== undefined && this.streams.get(streamKey) === entry) this.streams.delete(streamKey);
    this.itemCount -= entry.items;
    this.byteCount -= entry.bytes;
    this.bucketItems[entry.bucket] = (this.bucketItems[entry.bucket] as number) - entry.items;
    this.levelRequests[entry.level] = (this.levelRequests[entry.level] as number) - 1;
    this.levelItems[entry.level] = (this.levelItems[entry.level] as number) - entry.items;
    if (this.paused && this.itemCount <= this.o.resumeBelowItems && this.byteCount <= this.o.resumeBelowBytes) this.paused = false;
  }

  /**
   * Takes on new live options (see live-options.ts); the lanes and counts stand, as the options
   * that shape them are restart-only. The pause is judged again now: set at or over a new soft
   * limit (the next enqueue answers backpressure), released at or under both new watermarks.
   */
  reconfigure(o: SchedulerOptions): void {
    if (o.agingMs !== this.o.agingMs) for (const e of this.byId.values()) e.agedAt = agedAtFor(e.arrivedAt, e.level, o.agingMs);
    // A map built now from the queue would find several frames of a key queued while they were
    // all served: one would have to be answered superseded by a reconfigure, which answers nothing.
    if (o.streamSuperseded === 'serve') this.streams = null;
    else this.streams ??= new Map();
    this.o = o;
    if (this.itemCount >= o.softLimitItems || this.byteCount >= o.softLimitBytes) this.paused = true;
    else if (this.itemCount <= o.resumeBelowItems && this.byteCount <= o.resumeBelowBytes) this.paused = false;
  }

  /** Removes and returns everything, oldest first. */
  drain(): Entry<P>[] {
    const all = [...this.byId.values()].sort((a, b) => (fifoLess(a, b) ? -1 : 1));
    for (const entry of all) this.remove(entry);
    return all;
  }

  /** See ExpiryIndex.sweep: `expire` must remove the request from this queue. */
  sweepExpiry(hopeless: (e: Entry<P>) => boolean, expire: (e: Entry<P>) => void): void {
    this.expiry.sweep(hopeless, expire);
  }

  earliestLatestStart(estimateMs: (gear: number) => number): number {
    return this.expiry.earliestLatestStart(estimateMs);
  }

  topOverall(nowMs: number): Entry<P> | undefined {
    let best: Entry<P> | undefined;
    for (const lane of this.lanes) {
      const head = lane.head(nowMs);
      if (head !== undefined && (best === undefined || ranksBefore(head, best, nowMs))) best = head;
    }
    return best;
  }

  topOfBucket(bucket: number, nowMs: number): Entry<P> | undefined {
    let best: Entry<P> | undefined;
    for (let i = bucket; i < this.lanes.length; i += this.bucketCount) {
      const head = (this.lanes[i] as Lane<P>).head(nowMs);
      if (head !== undefined && (best === undefined || ranksBefore(head, best, nowMs))) best = head;
    }
    return best;
  }

  /** Best head outside `bucket`: a batch of `bucket` must not pass it (priority across buckets). */
  topOutside(bucket: number, nowMs: number): Entry<P> | undefined {
    let best: Entry<P> | undefined;
    for (const lane of this.lanes) {
      if (lane.bucket === bucket) continue;
      const head = lane.head(nowMs);
      if (head !== undefined && (best === undefined || ranksBefore(head, best, nowMs))) best = head;
    }
    return best;
  }
}
