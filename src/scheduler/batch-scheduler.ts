import { AdaptiveLimit } from './adaptive-limit.ts';
import { DeviceTimeEstimator } from './device-time-estimator.ts';
import { GearTable } from './gear-table.ts';
import { newEntry, passesOver, ranksBefore } from './lane.ts';
import type { Entry } from './lane.ts';
import { RequestQueue } from './request-queue.ts';
import { levelStats, SchedulerCounters } from './scheduler-counters.ts';
import { reconfiguredOptions, type LiveSchedulerOption, type LiveSchedulerOptionsInput } from './live-options.ts';
import { resolveSchedulerOptions } from './scheduler-options.ts';
import type { SchedulerOptions, SchedulerOptionsInput } from './scheduler-options.ts';
import type { Batch, Decision, DispatchReason, EnqueueResult, FullBatchCost, RejectReason, SchedulerRequest, SchedulerStats } from './scheduler-types.ts';
import { finishBatch } from './finish-batch.ts';
import { StaleEstimateProbe } from './stale-estimate-probe.ts';
import { ServedFrames } from './stream-served.ts';
import { trimPadding, type TrimContext } from './trim-padding.ts';
import { admission } from './queue-admission.ts';
import { rejection, supersededError } from './validate-request.ts';

/**
 * The pure batching core for one model: per-level queues, deadlines, gears, buckets and the
 * adaptive limit. Nothing here reads a clock; the runtime passes `nowMs` and acts on decisions.
 * Call `decide` on every arrival, every completion, and at the `untilAt` of a `wait`.
 */
export class BatchScheduler<P = unknown> {
  private opts: SchedulerOptions;
  private input: SchedulerOptionsInput;
  private readonly queue: RequestQueue<P>;
  private readonly counters: SchedulerCounters;
  private readonly gears: GearTable;
  /** gears.gearOf: the smallest gear holding n items. */
  private readonly gearOf: Int32Array;
  private readonly estimator: DeviceTimeEstimator;
  private readonly adaptive: AdaptiveLimit;
  private readonly probe: StaleEstimateProbe;
  private trim: TrimContext<P>;
  private seq = 0;
  /** With streamSuperseded 'drop' (else null): each stream's newest frame sent to the device. */
  private served: ServedFrames | null;
  /** Steps reported (clockStepped): arrivals, delays, aging and intervals run on the clock minus these. */
  private steppedMs = 0;

  constructor(options: SchedulerOptionsInput = {}) {
    const o = resolveSchedulerOptions(options);
    this.opts = o;
    this.input = { ...options };
    this.queue = new RequestQueue<P>(o);
    this.served = o.streamSuperseded === 'drop' ? new ServedFrames() : null;
    this.counters = new SchedulerCounters(o.priorityLevels, o.ewmaAlpha);
    this.estimator = new DeviceTimeEstimator(o.ewmaAlpha, o.priorDeviceBaseMs, o.priorDevicePerItemMs);
    this.gears = new GearTable(o.gears, o.gearsConfigured, this.estimator);
    this.gearOf = this.gears.gearOf;
    this.probe = new StaleEstimateProbe(this.estimator, o);
    this.adaptive = new AdaptiveLimit(o.gears, {
      targetLatencyMs: o.targetLatencyMs,
      windowBatches: o.adaptiveWindowBatches,
      hysteresis: o.adaptiveHysteresis,
      growIntervalMs: o.adaptiveGrowIntervalMs,
    });
    this.trim = { options: o, gears: this.gears, estimator: this.estimator, queue: this.queue, releaseAt: (e, limit) => this.releaseAt(e, limit) };
  }

  get options(): SchedulerOptions {
    return this.opts;
  }

  /**
   * Takes on new values of the live options from now on (LIVE_SCHEDULER_OPTIONS; see there for
   * what becomes of the requests already queued: they keep their arrival and deadline). A
   * restart-only or invalid option throws INVALID_CONFIG and changes nothing. Returns the options
   * whose value changed.
   */
  reconfigure(change: LiveSchedulerOptionsInput, nowMs: number): readonly LiveSchedulerOption[] {
    const next = reconfiguredOptions(this.input, this.opts, change);
    this.input = next.input;
    this.opts = next.options;
    this.queue.reconfigure(next.options);
    if (next.options.streamSuperseded === 'serve') this.served = null;
    else this.served ??= new ServedFrames();
    this.trim = { ...this.trim, options: next.options };
    this.adaptive.retarget(next.options.targetLatencyMs, nowMs - this.steppedMs);
    return next.changed;
  }

  get queuedRequests(): number {
    return this.queue.size;
  }

  /** Requests queued at one priority level (0 = most urgent); O(1). */
  queuedAtLevel(level: number): number {
    return this.queue.requestsAtLevel(level);
  }

  get queuedItems(): number {
    return this.queue.items;
  }

  /** Host memory held by queued requests (their `bytes`). */
  get queuedBytes(): number {
    return this.queue.bytes;
  }

  /** True from a soft limit (items or bytes) until both are back at their low watermarks. */
  get intakePaused(): boolean {
    return this.queue.intakePaused;
  }

  /** Current adaptive limit on items per batch (a gear). */
  get limit(): number {
    return this.adaptive.current;
  }

  /** Smallest gear holding `items`, or undefined when no gear does. */
  gearFor(items: number): number | undefined {
    return items >= 1 && items <= this.options.maxBatchSize ? (this.gearOf[items] as number) : undefined;
  }

  estimateDeviceMs(gear: number): number {
    return this.estimator.estimateMs(gear);
  }

  /**
   * Device time per item at full batches (see FullBatchCost), for the backlog gauges. Undefined
   * until a batch was measured: before that every estimate is the configured prior, a guess.
   * A full gear not run yet has the estimate the deadline checks use (derived from measured gears).
   */
  fullBatchCost(): FullBatchCost | undefined {
    if (!this.estimator.hasData) return undefined;
    const gear = this.adaptive.current;
    const { dispatchedRequests, dispatchedItems } = this.counters.snapshot();
    return { gear, deviceMsPerItem: this.estimator.estimateMs(gear) / gear, itemsPerRequest: dispatchedRequests > 0 ? dispatchedItems / dispatchedRequests : 1 };
  }

  /** Whether the next batch's leader is overdue (past (level + 1) × agingMs): it goes before all other work. */
  leadsOverdue(nowMs: number): boolean {
    const sinceMs = nowMs - this.steppedMs;
    const top = this.queue.topOverall(sinceMs);
    return top !== undefined && top.agedAt <= sinceMs;
  }

  /**
   * The runtime's clock jumped by `stepMs` (negative: back) without that much time passing (an NTP
   * step, a VM resume). Delays and aging of the requests queued, and the adaptive limit's and the
   * stale-estimate probe's intervals, keep counting the time that really passed: a step back of X ms
   * would otherwise hold each for X ms more. Deadlines are absolute (producers' clocks) and stay on
   * the stepped clock. O(1).
   */
  clockStepped(stepMs: number): void {
    this.steppedMs += stepMs;
  }

  has(id: string): boolean {
    return this.queue.has(id);
  }

  /** Stream keys with a queued request; always 0 unless streamSuperseded is 'drop'. */
  get queuedStreams(): number {
    return this.queue.streamCount;
  }

  /**
   * Queues `req`, or refuses it. With streamSuperseded 'drop' a request with a streamKey displaces
   * the queued request of its key when it is not older (by createdAt; on a tie the later arrival
   * is the newer), which the result's `superseded` hands back for the runtime to answer; an older
   * one is refused ('superseded') and the queued one stays. Either way the queue holds one per key.
   * So is one older than a frame of its key sent to the device in the last SERVED_FRAME_MEMORY_MS.
   */
  enqueue(req: SchedulerRequest<P>): EnqueueResult<P> {
    const o = this.options;
    const q = this.queue;
    const verdict = admission(q, o, req);
    if (verdict.kind === 'refuse') return this.reject(verdict.reason, verdict.message, req);
    if (verdict.kind === 'older-frame') {
      this.counters.countRejected();
      this.counters.countSuperseded();
      return { kind: 'rejected', reason: 'superseded', error: supersededError(req, verdict.newer.req) };
    }
    // Older than a frame of its stream already sent to the device: served now, its result would
    // come after that newer one's.
    const late = this.served?.refusal(req, req.arrivedAt - this.steppedMs) ?? null;
    if (late !== null) {
      this.counters.countRejected();
      this.counters.countSuperseded();
      return { kind: 'rejected', reason: 'superseded', error: late };
    }
    const { displaced } = verdict;
    if (displaced !== undefined) {
      q.remove(displaced);
      this.counters.countSuperseded();
    }
    q.add(newEntry(req, o, this.gearOf, req.arrivedAt - this.steppedMs, this.seq++));
    const kind = q.pauseAtSoftLimit() ? 'backpressure' : 'accepted';
    return displaced === undefined ? { kind } : { kind, superseded: [displaced.req] };
  }

  /**
   * The one decision: dispatch a batch, wait until a time, or idle; plus the requests that expired.
   * `deviceFreeAt` (optional) is when the device can start this batch, if it is still busy; the
   * deadline checks then count from it.
   * `maxLevel` caps the priority levels a batch led by work within the cap may take in: with 0, a
   * batch led by a top-level request holds only top-level requests (no lower-priority filler), so
   * urgent work sent to a busy device stays short. Batches led by lower levels are not capped.
   */
  decide(nowMs: number, deviceFreeAt: number = nowMs, maxLevel = Infinity): Decision<P> {
    // The probe's intervals, like the estimates' sample times, run on the step-free clock.
    this.probe.open(nowMs - this.steppedMs, deviceFreeAt - this.steppedMs);
    let probed = false;
    try {
      const d = this.decideNow(nowMs, deviceFreeAt, maxLevel);
      probed = d.kind === 'dispatch' && d.batch.probe;
      if (d.kind === 'dispatch') this.served?.dispatched(d.batch.members, nowMs - this.steppedMs);
      return d;
    } finally {
      this.probe.close(nowMs - this.steppedMs, probed);
    }
  }

  private decideNow(nowMs: number, deviceFreeAt: number, maxLevel: number): Decision<P> {
    const startAt = Math.max(nowMs, deviceFreeAt);
    // Queued arrivals are on this clock (see steppedMs); deadlines on nowMs's.
    const sinceMs = nowMs - this.steppedMs;
    const expired: SchedulerRequest<P>[] = [];
    this.expireUnreachable(startAt, expired);
    for (;;) {
      const top = this.queue.topOverall(sinceMs);
      if (top === undefined) return { kind: 'idle', expired };
      const limit = this.adaptive.current;
      const trigger = this.trigger(top.bucket, limit, sinceMs, startAt);
      if (typeof trigger === 'number') {
        return trigger === Infinity ? { kind: 'idle', expired } : { kind: 'wait', untilAt: trigger, expired };
      }
      const batch = this.compose(top.bucket, limit, trigger, sinceMs, startAt, expired, maxLevel);
      if (batch !== null) return { kind: 'dispatch', batch, expired };
      // Everything the bucket offered had expired; look again.
    }
  }

  /** Expires unreachable requests without forming a batch (e.g. while the device is busy). */
  collectExpired(nowMs: number, deviceFreeAt: number = nowMs): SchedulerRequest<P>[] {
    const expired: SchedulerRequest<P>[] = [];
    this.expireUnreachable(Math.max(nowMs, deviceFreeAt), expired);
    return expired;
  }

  /**
   * The earliest start time past which some queued request can no longer meet its deadline
   * (Infinity: none can miss one). A runtime that is not forming batches (device busy) wakes then
   * to answer it `expired`, instead of when the device next frees up.
   */
  nextUnreachableAt(): number {
    return this.queue.earliestLatestStart((gear) => this.gears.reachMs(gear));
  }

  /** Feeds a completed batch: device time per gear (EWMA) and the adaptive limit. */
  recordCompletion(gear: number, deviceMs: number, nowMs: number): void {
    const sinceMs = nowMs - this.steppedMs;
    this.estimator.record(gear, deviceMs, sinceMs, this.options.estimateTrustMs);
    this.gears.refresh();
    this.adaptive.record(
      deviceMs,
      sinceMs,
      (g) => this.estimator.estimateMs(g),
      (g) => (this.estimator.lastSampleAt(g) === undefined ? undefined : this.estimator.estimateMs(g)),
    );
  }

  /** A new model version took over: estimates stay as guesses, stale (restarted by the next sample, probed). */
  readonly estimatesStale = (): void => this.estimator.markStale();

  /** Removes one queued request (cancellation); undefined if it is not queued. */
  remove(id: string): SchedulerRequest<P> | undefined {
    const entry = this.queue.get(id);
    if (entry === undefined) return undefined;
    this.queue.remove(entry);
    return entry.req;
  }

  /** Removes and returns everything queued, oldest first (shutdown: release / nack them). */
  drain(): SchedulerRequest<P>[] {
    return this.queue.drain().map((e) => e.req);
  }

  stats(nowMs: number): SchedulerStats {
    const c = this.counters;
    const adaptive = this.adaptive.stats;
    const q = this.queue;
    const levels = levelStats(c, q, this.options.priorityLevels, nowMs - this.steppedMs);
    return {
      queuedRequests: q.size,
      queuedItems: q.items,
      queuedBytes: q.bytes,
      intakePaused: q.intakePaused,
      levels,
      ...c.snapshot(),
      adaptiveLimit: adaptive.limit,
      adaptiveLastP90Ms: adaptive.lastP90Ms,
      adaptiveChanges: adaptive.changes,
      deviceEstimates: this.estimator.snapshot(),
    };
  }

  // ---- internals -------------------------------------------------------------------------------

  private reject(reason: RejectReason, message: string, req: SchedulerRequest<P>): EnqueueResult<P> {
    this.counters.countRejected();
    return rejection(reason, message, req);
  }

  private expire(entry: Entry<P>, out: SchedulerRequest<P>[]): void {
    this.queue.remove(entry);
    this.counters.countExpired(entry.level);
    out.push(entry.req);
  }

  /** True when no batch holding the request (padded up as far as needed) ends by its deadline. */
  private unreachable(entry: Entry<P>, startAt: number): boolean {
    return !this.fits(startAt, entry.gear, entry.deadline);
  }

  /** Whether a batch whose own gear is `gear` can end by `deadline`: in some gear, or as a probe. */
  private fits(startAt: number, gear: number, deadline: number): boolean {
    return this.meets(startAt, gear, deadline) || this.probe.fits(startAt, gear, deadline);
  }

  /** Whether a batch whose own gear is `gear` ends by `deadline` by the estimates, in some gear. */
  private readonly meets = (startAt: number, gear: number, deadline: number): boolean => startAt + this.gears.reachMs(gear) <= deadline;

  /**
   * Expires every queued request that cannot make its deadline from `startAt`, wherever it sits in
   * its lane (a larger request behind a viable head runs out of time first): see ExpiryIndex.
   */
  private expireUnreachable(startAt: number, out: SchedulerRequest<P>[]): void {
    this.queue.sweepExpiry(
      (e) => this.unreachable(e, startAt),
      (e) => this.expire(e, out),
    );
  }

  /** Latest start that keeps `entry` within its deadline in the batch its bucket would form. */
  private releaseAt(entry: Entry<P>, limit: number): number {
    const wouldHold = Math.min(this.options.maxBatchSize, Math.max(entry.items, Math.min(limit, this.queue.itemsInBucket(entry.bucket))));
    return entry.deadline - this.gears.reachMs(this.gearOf[wouldHold] as number) - this.options.deadlineMarginMs;
  }

  /**
   * Why the top bucket should go now, or the time to look again (Infinity: nothing timed; on the
   * deadlines' clock, as startAt; sinceMs is the arrivals', see steppedMs).
   * Each lane's earliest deadline stands for the lane: while no request of a bucket is larger than
   * the limit, every one would join a batch of the same size (releaseAt), so deadline order is
   * release order. A larger one makes its bucket full: the top bucket then goes at once, and any
   * other bucket waits for the top anyway, whoever's deadline fired the trigger.
   */
  private trigger(bucket: number, limit: number, sinceMs: number, startAt: number): DispatchReason | number {
    if (this.queue.itemsInBucket(bucket) >= limit) return 'full';
    const delays = this.options.maxQueueDelayMs;
    let wakeAt = Infinity;
    for (const lane of this.queue.lanes) {
      const oldest = lane.fifo.peek();
      if (oldest === undefined) continue;
      const dueAt = oldest.arrivedAt + (delays[lane.level] as number);
      if (dueAt <= sinceMs) return 'delay';
      if (dueAt + this.steppedMs < wakeAt) wakeAt = dueAt + this.steppedMs;
      const urgent = lane.edf.peek() as Entry<P>;
      if (urgent.deadline !== Infinity) {
        const releaseAt = this.releaseAt(urgent, limit);
        if (releaseAt <= startAt) return 'deadline';
        if (releaseAt < wakeAt) wakeAt = releaseAt;
      }
    }
    return wakeAt;
  }

  private compose(
    bucket: number,
    limit: number,
    reason: DispatchReason,
    sinceMs: number,
    startAt: number,
    expired: SchedulerRequest<P>[],
    maxLevel = Infinity,
  ): Batch<P> | null {
    const q = this.queue;
    const outside = q.bucketCount > 1 ? q.topOutside(bucket, sinceMs) : undefined;
    const members: Entry<P>[] = [];
    let items = 0;
    let minDeadline = Infinity;
    for (let next = q.topOfBucket(bucket, sinceMs); next !== undefined; next = q.topOfBucket(bucket, sinceMs)) {
      if (this.unreachable(next, startAt)) {
        this.expire(next, expired);
        continue;
      }
      if (members.length > 0) {
        if (next.req.alone === true) break;
        // The cap keeps filler out of batches that carry urgent work; a batch led by lower-level
        // work (an overdue bulk request, or no urgent work at the top) is formed as usual, or a
        // capped decide would shrink it to one request and starve the bulk work it serves.
        if (next.level > maxLevel && (members[0] as Entry<P>).level <= maxLevel) break;
        const total = items + next.items;
        if (total > limit) break;
        if (outside !== undefined && passesOver(next, outside, sinceMs)) break;
        const deadline = Math.min(minDeadline, next.deadline);
        // Past the estimate only in a probe already: growing an in-time batch into a stale gear makes it late.
        const inTime = this.meets(startAt, this.gearOf[items] as number, minDeadline);
        const gear = this.gearOf[total] as number;
        if (!(inTime ? this.meets(startAt, gear, deadline) : this.fits(startAt, gear, deadline))) break;
      } else if (outside !== undefined && ranksBefore(outside, next, sinceMs)) {
        // The first member must be the overall top (it was, unless that one just expired).
        break;
      }
      q.remove(next);
      members.push(next);
      items += next.items;
      if (next.deadline < minDeadline) minDeadline = next.deadline;
      if (items >= limit || next.req.alone === true) break;
    }
    if (members.length === 0) return null;
    items = trimPadding(this.trim, members, items, limit, sinceMs, startAt);
    return finishBatch(this.trim, this.counters, members, items, bucket, limit, reason, startAt);
  }
}
