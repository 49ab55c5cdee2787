import { FleetError } from '../errors/fleet-error.ts';
import { AdaptiveLimit } from './adaptive-limit.ts';
import { DeviceTimeEstimator } from './device-time-estimator.ts';
import { ExpiryIndex } from './expiry-index.ts';
import { Lane, fifoLess, passesOver, ranksBefore } from './lane.ts';
import type { Entry } from './lane.ts';
import { resolveSchedulerOptions } from './scheduler-options.ts';
import type { SchedulerOptions, SchedulerOptionsInput } from './scheduler-options.ts';
import type {
  Batch,
  Decision,
  DispatchReason,
  EnqueueResult,
  RejectReason,
  SchedulerRequest,
  SchedulerStats,
} from './scheduler-types.ts';

/**
 * The pure batching core for one model: per-level queues, deadlines, gears, buckets and the
 * adaptive limit. Nothing here reads a clock; the runtime passes `nowMs` and acts on decisions.
 * Call `decide` on every arrival, every completion, and at the `untilAt` of a `wait`.
 */
export class BatchScheduler<P = unknown> {
  readonly options: SchedulerOptions;
  private readonly lanes: Lane<P>[] = [];
  private readonly bucketCount: number;
  private readonly bucketItems: number[];
  private readonly levelRequests: number[];
  private readonly levelItems: number[];
  private readonly levelExpired: number[];
  private readonly levelDispatched: number[];
  /** gearOf[n]: smallest gear holding n items (n <= the largest gear). */
  private readonly gearOf: Int32Array;
  private readonly byId = new Map<string, Entry<P>>();
  private readonly expiry = new ExpiryIndex<P>();
  private readonly estimator: DeviceTimeEstimator;
  private readonly adaptive: AdaptiveLimit;
  private seq = 0;
  private items = 0;
  private bytes = 0;
  private paused = false;
  private counters = { batches: 0, requests: 0, items: 0, paddedItems: 0, slots: 0, realSlots: 0, expired: 0, rejected: 0 };
  private recentPaddingRatio = 0;
  /** During a decide that may send a batch against a stale estimate: its clock (see fits). */
  private probeAt: number | undefined;
  private lastProbeAt = -Infinity;

  constructor(options: SchedulerOptionsInput = {}) {
    const o = resolveSchedulerOptions(options);
    this.options = o;
    this.bucketCount = Math.max(1, o.buckets.length);
    for (let level = 0; level < o.priorityLevels; level++) {
      for (let bucket = 0; bucket < this.bucketCount; bucket++) this.lanes.push(new Lane<P>(level, bucket));
    }
    this.bucketItems = new Array<number>(this.bucketCount).fill(0);
    this.levelRequests = new Array<number>(o.priorityLevels).fill(0);
    this.levelItems = new Array<number>(o.priorityLevels).fill(0);
    this.levelExpired = new Array<number>(o.priorityLevels).fill(0);
    this.levelDispatched = new Array<number>(o.priorityLevels).fill(0);
    this.gearOf = new Int32Array(o.maxBatchSize + 1);
    let g = 0;
    for (let n = 1; n <= o.maxBatchSize; n++) {
      while ((o.gears[g] as number) < n) g++;
      this.gearOf[n] = o.gears[g] as number;
    }
    this.estimator = new DeviceTimeEstimator(o.ewmaAlpha, o.priorDeviceBaseMs, o.priorDevicePerItemMs);
    this.adaptive = new AdaptiveLimit(o.gears, {
      targetLatencyMs: o.targetLatencyMs,
      windowBatches: o.adaptiveWindowBatches,
      hysteresis: o.adaptiveHysteresis,
      growIntervalMs: o.adaptiveGrowIntervalMs,
    });
  }

  get queuedRequests(): number {
    return this.byId.size;
  }

  /** Requests queued at one priority level (0 = most urgent); O(1). */
  queuedAtLevel(level: number): number {
    return this.levelRequests[level] ?? 0;
  }

  get queuedItems(): number {
    return this.items;
  }

  /** Host memory held by queued requests (their `bytes`). */
  get queuedBytes(): number {
    return this.bytes;
  }

  /** True from a soft limit (items or bytes) until both are back at their low watermarks. */
  get intakePaused(): boolean {
    return this.paused;
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

  has(id: string): boolean {
    return this.byId.has(id);
  }

  enqueue(req: SchedulerRequest<P>): EnqueueResult {
    const o = this.options;
    const invalid = this.validate(req);
    if (invalid !== null) return this.reject(invalid[0], invalid[1], req);
    if (this.byId.has(req.id)) return this.reject('duplicate', `request ${req.id} is already queued`, req);
    if (this.items + req.items > o.hardLimitItems) {
      return this.reject('queue-full', `queue holds ${this.items} items; ${req.items} more would pass hardLimitItems ${o.hardLimitItems}`, req);
    }
    const bytes = req.bytes ?? 0;
    // An empty queue takes any one request: the wire limits bound its size, and refusing it here
    // would refuse it forever.
    if (this.byId.size > 0 && this.bytes + bytes > o.hardLimitBytes) {
      return this.reject('queue-full', `queue holds ${this.bytes} bytes; ${bytes} more would pass hardLimitBytes ${o.hardLimitBytes}`, req);
    }
    let bucket = 0;
    if (o.buckets.length > 0) {
      const length = req.length as number;
      while ((o.buckets[bucket] as number) < length) bucket++;
    }
    const level = req.priority;
    const entry: Entry<P> = {
      req,
      level,
      bucket,
      items: req.items,
      gear: this.gearOf[req.items] as number,
      bytes,
      arrivedAt: req.arrivedAt,
      deadline: req.deadlineAt ?? Infinity,
      agedAt: o.agingMs === null ? Infinity : req.arrivedAt + (level + 1) * o.agingMs,
      seq: this.seq++,
      edfPos: -1,
      fifoPos: -1,
      expiryPos: -1,
    };
    const lane = this.lanes[level * this.bucketCount + bucket] as Lane<P>;
    lane.edf.push(entry);
    lane.fifo.push(entry);
    this.expiry.add(entry);
    this.byId.set(req.id, entry);
    this.items += entry.items;
    this.bytes += bytes;
    this.bucketItems[bucket] = (this.bucketItems[bucket] as number) + entry.items;
    this.levelRequests[level] = (this.levelRequests[level] as number) + 1;
    this.levelItems[level] = (this.levelItems[level] as number) + entry.items;
    if (this.items >= o.softLimitItems || this.bytes >= o.softLimitBytes) this.paused = true;
    return this.paused ? { kind: 'backpressure' } : { kind: 'accepted' };
  }

  /**
   * The one decision: dispatch a batch, wait until a time, or idle; plus the requests that expired.
   * `deviceFreeAt` (optional) is when the device can start this batch, if it is still busy; the
   * deadline checks then count from it.
   */
  /**
   * `maxLevel` caps the priority levels a batch led by work within the cap may take in: with 0, a
   * batch led by a top-level request holds only top-level requests (no lower-priority filler), so
   * urgent work sent to a busy device stays short. Batches led by lower levels are not capped.
   */
  decide(nowMs: number, deviceFreeAt: number = nowMs, maxLevel = Infinity): Decision<P> {
    // Probes only on an idle device, where a batch late for its deadline delays nothing else.
    this.probeAt = deviceFreeAt <= nowMs && nowMs - this.lastProbeAt >= this.options.probeIntervalMs ? nowMs : undefined;
    try {
      const d = this.decideNow(nowMs, deviceFreeAt, maxLevel);
      if (d.kind === 'dispatch' && d.batch.probe) this.lastProbeAt = nowMs;
      return d;
    } finally {
      this.probeAt = undefined;
    }
  }

  private decideNow(nowMs: number, deviceFreeAt: number, maxLevel: number): Decision<P> {
    const startAt = Math.max(nowMs, deviceFreeAt);
    const expired: SchedulerRequest<P>[] = [];
    this.expireUnreachable(startAt, expired);
    for (;;) {
      const top = this.topOverall(nowMs);
      if (top === undefined) return { kind: 'idle', expired };
      const limit = this.adaptive.current;
      const trigger = this.trigger(top.bucket, limit, nowMs, startAt);
      if (typeof trigger === 'number') {
        return trigger === Infinity ? { kind: 'idle', expired } : { kind: 'wait', untilAt: trigger, expired };
      }
      const batch = this.compose(top.bucket, limit, trigger, nowMs, startAt, expired, maxLevel);
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
    return this.expiry.earliestLatestStart((gear) => this.estimator.estimateMs(gear));
  }

  /** Feeds a completed batch: device time per gear (EWMA) and the adaptive limit. */
  recordCompletion(gear: number, deviceMs: number, nowMs: number): void {
    this.estimator.record(gear, deviceMs, nowMs);
    this.adaptive.record(deviceMs, nowMs, (g) => this.estimator.estimateMs(g));
  }

  /** Removes one queued request (cancellation); undefined if it is not queued. */
  remove(id: string): SchedulerRequest<P> | undefined {
    const entry = this.byId.get(id);
    if (entry === undefined) return undefined;
    this.removeEntry(entry);
    return entry.req;
  }

  /** Removes and returns everything queued, oldest first (shutdown: release / nack them). */
  drain(): SchedulerRequest<P>[] {
    const all = [...this.byId.values()].sort((a, b) => (fifoLess(a, b) ? -1 : 1));
    for (const entry of all) this.removeEntry(entry);
    return all.map((e) => e.req);
  }

  stats(nowMs: number): SchedulerStats {
    const c = this.counters;
    const adaptive = this.adaptive.stats;
    const levels = this.levelRequests.map((requests, level) => {
      let oldest = Infinity;
      for (let b = 0; b < this.bucketCount; b++) {
        const head = (this.lanes[level * this.bucketCount + b] as Lane<P>).fifo.peek();
        if (head !== undefined && head.arrivedAt < oldest) oldest = head.arrivedAt;
      }
      return {
        level,
        requests,
        items: this.levelItems[level] as number,
        oldestAgeMs: oldest === Infinity ? 0 : Math.max(0, nowMs - oldest),
        expired: this.levelExpired[level] as number,
        dispatched: this.levelDispatched[level] as number,
      };
    });
    return {
      queuedRequests: this.byId.size,
      queuedItems: this.items,
      queuedBytes: this.bytes,
      intakePaused: this.paused,
      levels,
      dispatchedBatches: c.batches,
      dispatchedRequests: c.requests,
      dispatchedItems: c.items,
      paddedItems: c.paddedItems,
      paddingRatio: c.slots === 0 ? 0 : 1 - c.realSlots / c.slots,
      recentPaddingRatio: this.recentPaddingRatio,
      expiredRequests: c.expired,
      rejectedRequests: c.rejected,
      adaptiveLimit: adaptive.limit,
      adaptiveLastP90Ms: adaptive.lastP90Ms,
      adaptiveChanges: adaptive.changes,
      deviceEstimates: this.estimator.snapshot(),
    };
  }

  // ---- internals -------------------------------------------------------------------------------

  private validate(req: SchedulerRequest<P>): [RejectReason, string] | null {
    const o = this.options;
    if (!Number.isInteger(req.priority) || req.priority < 0 || req.priority >= o.priorityLevels) {
      return ['invalid', `priority ${req.priority} is outside 0..${o.priorityLevels - 1}`];
    }
    if (!Number.isInteger(req.items) || req.items < 1) return ['invalid', `items must be a positive integer, got ${req.items}`];
    if (!Number.isFinite(req.arrivedAt)) return ['invalid', 'arrivedAt must be a finite epoch ms'];
    if (req.deadlineAt !== undefined && Number.isNaN(req.deadlineAt)) return ['invalid', 'deadlineAt is NaN'];
    if (req.bytes !== undefined && !(Number.isFinite(req.bytes) && req.bytes >= 0)) return ['invalid', `bytes must be a finite number >= 0, got ${req.bytes}`];
    if (req.items > o.maxBatchSize) {
      return ['too-large', `request has ${req.items} samples; the largest batch is ${o.maxBatchSize} and a request is never split`];
    }
    if (o.buckets.length > 0) {
      const length = req.length;
      if (length === undefined || !Number.isInteger(length) || length < 0) {
        return ['invalid', 'length (of the variable axis) is required for a bucketed model'];
      }
      const biggest = o.buckets[o.buckets.length - 1] as number;
      if (length > biggest) return ['too-long', `length ${length} exceeds the biggest bucket ${biggest}`];
    }
    return null;
  }

  private reject(reason: RejectReason, message: string, req: SchedulerRequest<P>): EnqueueResult {
    this.counters.rejected++;
    const code = reason === 'queue-full' ? 'QUEUE_FULL' : reason === 'too-large' || reason === 'too-long' ? 'LIMIT_EXCEEDED' : 'INVALID_ARGUMENT';
    return { kind: 'rejected', reason, error: new FleetError(code, message, { details: { requestId: req.id, reason } }) };
  }

  private removeEntry(entry: Entry<P>): void {
    const lane = this.lanes[entry.level * this.bucketCount + entry.bucket] as Lane<P>;
    lane.edf.removeAt(entry.edfPos);
    lane.fifo.removeAt(entry.fifoPos);
    this.expiry.remove(entry);
    this.byId.delete(entry.req.id);
    this.items -= entry.items;
    this.bytes -= entry.bytes;
    this.bucketItems[entry.bucket] = (this.bucketItems[entry.bucket] as number) - entry.items;
    this.levelRequests[entry.level] = (this.levelRequests[entry.level] as number) - 1;
    this.levelItems[entry.level] = (this.levelItems[entry.level] as number) - entry.items;
    if (this.paused && this.items <= this.options.resumeBelowItems && this.bytes <= this.options.resumeBelowBytes) this.paused = false;
  }

  private expire(entry: Entry<P>, out: SchedulerRequest<P>[]): void {
    this.removeEntry(entry);
    this.counters.expired++;
    this.levelExpired[entry.level] = (this.levelExpired[entry.level] as number) + 1;
    out.push(entry.req);
  }

  /** True when the request cannot finish by its deadline even in the smallest batch holding it. */
  private unreachable(entry: Entry<P>, startAt: number): boolean {
    return !this.fits(startAt, entry.gear, entry.deadline);
  }

  /**
   * Whether a batch of `gear` started at `startAt` meets `deadline`: by the estimate, or, during a
   * decide that may probe (see estimateTrustMs), because the deadline is still ahead and the
   * gear's estimate is stale. An estimate that rules its gear out is never corrected otherwise:
   * the traffic it rules out is expired without device time, so that gear never runs again.
   * No side effect: a batch is a probe when it is sent past its estimate (see finish), not when
   * some request was merely spared by this check.
   */
  private fits(startAt: number, gear: number, deadline: number): boolean {
    if (startAt + this.estimator.estimateMs(gear) <= deadline) return true;
    // Before any batch completed the prior rules: a probe corrects learnt estimates, not guesses.
    if (this.probeAt === undefined || deadline <= startAt || !this.estimator.hasData) return false;
    const sampledAt = this.estimator.lastSampleAt(gear);
    return sampledAt === undefined || this.probeAt - sampledAt >= this.options.estimateTrustMs;
  }

  /**
   * Expires every queued request that cannot make its deadline from `startAt`, wherever it sits in
   * its lane (a larger request behind a viable head runs out of time first): see ExpiryIndex.
   */
  private expireUnreachable(startAt: number, out: SchedulerRequest<P>[]): void {
    this.expiry.sweep(
      (e) => this.unreachable(e, startAt),
      (e) => this.expire(e, out),
    );
  }

  private topOverall(nowMs: number): Entry<P> | undefined {
    let best: Entry<P> | undefined;
    for (const lane of this.lanes) {
      const head = lane.head(nowMs);
      if (head !== undefined && (best === undefined || ranksBefore(head, best, nowMs))) best = head;
    }
    return best;
  }

  private topOfBucket(bucket: number, nowMs: number): Entry<P> | undefined {
    let best: Entry<P> | undefined;
    for (let i = bucket; i < this.lanes.length; i += this.bucketCount) {
      const head = (this.lanes[i] as Lane<P>).head(nowMs);
      if (head !== undefined && (best === undefined || ranksBefore(head, best, nowMs))) best = head;
    }
    return best;
  }

  /** Best head outside `bucket`: a batch of `bucket` must not pass it (priority across buckets). */
  private topOutside(bucket: number, nowMs: number): Entry<P> | undefined {
    let best: Entry<P> | undefined;
    for (const lane of this.lanes) {
      if (lane.bucket === bucket) continue;
      const head = lane.head(nowMs);
      if (head !== undefined && (best === undefined || ranksBefore(head, best, nowMs))) best = head;
    }
    return best;
  }

  /** Latest start that keeps `entry` within its deadline in the batch its bucket would form. */
  private releaseAt(entry: Entry<P>, limit: number): number {
    const wouldHold = Math.min(this.options.maxBatchSize, Math.max(entry.items, Math.min(limit, this.bucketItems[entry.bucket] as number)));
    return entry.deadline - this.estimator.estimateMs(this.gearOf[wouldHold] as number) - this.options.deadlineMarginMs;
  }

  /** Why the top bucket should go now, or the time to look again (Infinity: nothing timed). */
  private trigger(bucket: number, limit: number, nowMs: number, startAt: number): DispatchReason | number {
    if ((this.bucketItems[bucket] as number) >= limit) return 'full';
    const delays = this.options.maxQueueDelayMs;
    let wakeAt = Infinity;
    for (const lane of this.lanes) {
      const oldest = lane.fifo.peek();
      if (oldest === undefined) continue;
      const dueAt = oldest.arrivedAt + (delays[lane.level] as number);
      if (dueAt <= nowMs) return 'delay';
      if (dueAt < wakeAt) wakeAt = dueAt;
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
    nowMs: number,
    startAt: number,
    expired: SchedulerRequest<P>[],
    maxLevel = Infinity,
  ): Batch<P> | null {
    const outside = this.bucketCount > 1 ? this.topOutside(bucket, nowMs) : undefined;
    const members: Entry<P>[] = [];
    let items = 0;
    let minDeadline = Infinity;
    for (let next = this.topOfBucket(bucket, nowMs); next !== undefined; next = this.topOfBucket(bucket, nowMs)) {
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
        if (outside !== undefined && passesOver(next, outside, nowMs)) break;
        const deadline = Math.min(minDeadline, next.deadline);
        if (!this.fits(startAt, this.gearOf[total] as number, deadline)) break;
      } else if (outside !== undefined && ranksBefore(outside, next, nowMs)) {
        // The first member must be the overall top (it was, unless that one just expired).
        break;
      }
      this.removeEntry(next);
      members.push(next);
      items += next.items;
      if (next.deadline < minDeadline) minDeadline = next.deadline;
      if (items >= limit || next.req.alone === true) break;
    }
    if (members.length === 0) return null;
    items = this.trimPadding(members, items, limit, nowMs, startAt);
    return this.finish(members, items, bucket, limit, reason, startAt);
  }

  /**
   * Hands the batch's tail back when a smaller gear runs the remaining members at a lower device
   * cost per item, and every returned member can still afford to wait.
   */
  private trimPadding(members: Entry<P>[], items: number, limit: number, nowMs: number, startAt: number): number {
    const gear = this.gearOf[items] as number;
    if (!this.options.trimPadding || !this.options.gearsConfigured || gear === items || members.length < 2) return items;
    let keep = members.length;
    let kept = items;
    while (keep > 1 && (this.gearOf[kept] as number) >= gear) kept -= (members[--keep] as Entry<P>).items;
    const smaller = this.gearOf[kept] as number;
    if (smaller >= gear) return items;
    const est = (g: number) => this.estimator.estimateMs(g);
    if (est(smaller) / kept >= est(gear) / items) return items;
    const delays = this.options.maxQueueDelayMs;
    // A returned member starts no earlier than the end of the trimmed batch, not at its start.
    const nextStartAt = startAt + est(smaller);
    for (let i = keep; i < members.length; i++) {
      const e = members[i] as Entry<P>;
      const canWait = e.arrivedAt + (delays[e.level] as number) > nowMs && e.agedAt > nowMs && this.releaseAt(e, limit) > nextStartAt;
      if (!canWait) return items;
    }
    for (const e of members.splice(keep)) this.requeue(e);
    return kept;
  }

  private requeue(entry: Entry<P>): void {
    const lane = this.lanes[entry.level * this.bucketCount + entry.bucket] as Lane<P>;
    lane.edf.push(entry);
    lane.fifo.push(entry);
    this.expiry.add(entry);
    this.byId.set(entry.req.id, entry);
    this.items += entry.items;
    // removeEntry took its bytes off: without this, queuedBytes drifts below what is held and the byte limits loosen.
    this.bytes += entry.bytes;
    this.bucketItems[entry.bucket] = (this.bucketItems[entry.bucket] as number) + entry.items;
    this.levelRequests[entry.level] = (this.levelRequests[entry.level] as number) + 1;
    this.levelItems[entry.level] = (this.levelItems[entry.level] as number) + entry.items;
  }

  private finish(members: Entry<P>[], items: number, bucket: number, limit: number, reason: DispatchReason, startAt: number): Batch<P> {
    const gear = this.gearOf[items] as number;
    const estimatedDeviceMs = this.estimator.estimateMs(gear);
    let minDeadline = Infinity;
    for (const e of members) if (e.deadline < minDeadline) minDeadline = e.deadline;
    const bound = this.options.buckets.length > 0 ? (this.options.buckets[bucket] as number) : null;
    let realSlots = items;
    let paddedLengthSlots = 0;
    if (bound !== null) {
      realSlots = 0;
      for (const e of members) realSlots += e.items * (e.req.length as number);
      paddedLengthSlots = items * bound - realSlots;
    }
    const slots = gear * (bound ?? 1);
    const c = this.counters;
    c.batches++;
    c.requests += members.length;
    c.items += items;
    c.paddedItems += gear - items;
    c.slots += slots;
    c.realSlots += realSlots;
    const ratio = slots === 0 ? 0 : 1 - realSlots / slots;
    this.recentPaddingRatio = c.batches === 1 ? ratio : this.recentPaddingRatio + this.options.ewmaAlpha * (ratio - this.recentPaddingRatio);
    for (const e of members) this.levelDispatched[e.level] = (this.levelDispatched[e.level] as number) + 1;
    return {
      members: members.map((e) => e.req),
      items,
      gear,
      paddedItems: gear - items,
      bucket: bound === null ? null : bucket,
      boundLength: bound,
      paddedLengthSlots,
      startAt,
      estimatedDeviceMs,
      // Only fits' stale-estimate allowance lets a member in past the estimate.
      probe: startAt + estimatedDeviceMs > minDeadline,
      reason,
      limit,
    };
  }
}
