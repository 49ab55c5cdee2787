import type { FleetConfig } from '../contracts/fleet-config.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import type { FleetMetrics } from '../observability/metrics.ts';
import type { Logger } from '../observability/logger.ts';
import type { SchedulerRequest } from '../scheduler/scheduler-types.ts';
import type { Delivery, Outcome, Transport } from '../transport/transport.ts';
import type { CrashSuspects } from './crash-suspects.ts';
import type { Lane, ModelLanes } from './model-lanes.ts';
import { admitDelivery, type Payload } from './request-admission.ts';
import { identityOfRequest, type buildResult, type ResultIdentity } from './result-builder.ts';

/** Deliveries admitted per event-loop turn (see admitSlice). */
const ADMIT_SLICE = 256;
/** Under sustained overload, at most one backpressure line per lane this often. */
const BACKPRESSURE_LOG_MS = 30_000;

/** Answers a delivery that is not queued (Answerer.answer). */
export type AnswerDelivery = (
  delivery: Delivery,
  identity: ResultIdentity,
  replyTo: string | undefined,
  b: Parameters<typeof buildResult>[2],
  dlq?: Outcome['dlq'],
) => void;

export interface RequestIntakeOptions {
  readonly config: FleetConfig;
  readonly lanes: ModelLanes<Payload>;
  readonly crash: CrashSuspects;
  readonly transport: Transport;
  readonly metrics: FleetMetrics;
  readonly log: Logger;
  /** Whether the worker takes new work: a delivery admitted otherwise goes back to the broker. */
  readonly running: () => boolean;
  /** Invalid, expired and rejected deliveries are answered at once, never queued. */
  readonly answer: AnswerDelivery;
  /** Queued requests displaced by a newer frame of their stream, `by` (Answerer.answerSuperseded). */
  readonly answerSuperseded: (superseded: readonly SchedulerRequest<Payload>[], by: SchedulerRequest<Payload>, nowMs: number) => void;
  /** The scheduling loop: runs after each admission slice. */
  readonly pump: () => void;
  /** The worker's clock (WorkerClock.nowMs): arrival times go into the scheduler. @defaultValue Date.now */
  readonly now?: () => number;
}

/**
 * Answered request ids a worker remembers to count duplicates: ~10 MiB of heap once full, which
 * takes 100,000 requests (a soak's heap grows until then; see bench/fleet-soak.ts).
 */
export const SEEN_IDS_MAX = 100_000;

/**
 * A device worker's intake (DESIGN §3-§4): deliveries → decode/validate → their lane's scheduler.
 * A redelivery of a request held here rides along with it; a lane past its soft limit pauses the
 * broker's lower priorities until it drains. JS thread only: runs from the transport's callbacks
 * and the worker's scheduling loop.
 */
export class RequestIntake {
  /**
   * Deliveries wait here, by source priority, until admitted. Admission (decode + validate) runs
   * in slices with a yield between them: a fetch of thousands of low-priority messages must not
   * hold the event loop while an urgent one is waiting behind it.
   */
  private readonly intake: Delivery[][] = [];
  private intakeScheduled = false;
  /** Queued requests by id, so a redelivery that arrives meanwhile rides along with the original. */
  private readonly queued = new Map<string, Payload>();
  /** Answered request ids (oldest first), so a later delivery of one counts as a duplicate. */
  private readonly seen = new Map<string, number>();
  /** Per lane: when a backpressure pause was last logged, and what was held back since. */
  private readonly pauseLog = new Map<string, { loggedAt: number; held: number; resumeLogged: boolean }>();
  private readonly paused = new Map<string, number[]>();
  /** The last top-priority admission on this device, any lane: the device is what urgent work waits for. */
  private lastUrgent = -Infinity;
  /** The same per lane (by key). */
  private readonly lastUrgentByLane = new Map<string, number>();

  constructor(private readonly o: RequestIntakeOptions) {}

  get lastUrgentAt(): number {
    return this.lastUrgent;
  }

  /** The last top-priority admission to the lane of `key` (-Infinity: none). */
  lastUrgentAtOf(key: string): number {
    return this.lastUrgentByLane.get(key) ?? -Infinity;
  }

  /** Whether deliveries are still waiting for admission (the worker is not idle while some are). */
  get waiting(): boolean {
    return this.intake.some((q) => q && q.length > 0);
  }

  /** The transport's onDeliveries. */
  push(deliveries: Delivery[]): void {
    for (const d of deliveries) {
      const level = Math.max(0, Math.min(15, d.priority ?? 0));
      (this.intake[level] ??= []).push(d);
    }
    this.admitSlice();
  }

  private admitSlice(): void {
    this.intakeScheduled = false;
    const nowMs = (this.o.now ?? Date.now)();
    let budget = ADMIT_SLICE;
    for (const queue of this.intake) {
      if (!queue) continue;
      while (budget > 0 && queue.length > 0) {
        this.admit(queue.shift() as Delivery, nowMs);
        budget--;
      }
      if (budget === 0) break;
    }
    this.o.pump();
    if (!this.intakeScheduled && this.waiting) {
      this.intakeScheduled = true;
      setImmediate(() => this.admitSlice());
    }
  }

  private admit(delivery: Delivery, nowMs: number): void {
    const suspect = this.o.crash.take(delivery);
    if (suspect === undefined) return this.admitNow(delivery, nowMs);
    void suspect.then((d) => {
      this.admitNow(d, (this.o.now ?? Date.now)());
      this.o.pump();
    });
  }

  private admitNow(delivery: Delivery, nowMs: number): void {
    const a = admitDelivery(delivery, nowMs, {
      limits: this.o.config.limits,
      running: this.o.running(),
      lanes: this.o.lanes,
      maxHangsPerRequest: this.o.config.worker.maxHangsPerRequest,
    });
    if (a.kind === 'release') {
      // Not ours to answer any more: give it back so another worker takes it.
      void this.o.transport.release([delivery]);
      return;
    }
    if (a.kind === 'answer') {
      // A producer's retry after the deadline of a request still held here: answering it `expired`
      // would give the id two contradicting results (and count its miss twice). It takes the held
      // request's result, as any redelivery does.
      if (a.request !== undefined && this.rideAlong(a.request, delivery)) return;
      // Past its deadline on arrival: lost upstream (publish, broker, backlog), not in our queue.
      if (a.expired === true) this.o.metrics.deadlineMiss(a.identity.model, 'admission');
      this.o.answer(delivery, a.identity, a.replyTo, { ...a.result, nowMs }, a.dlq);
      return;
    }
    const { lane, entry } = a;
    const { request } = entry.payload;
    if (this.rideAlong(request, delivery)) return;
    const verdict = lane.scheduler.enqueue(entry);
    if (verdict.kind === 'rejected') {
      if (verdict.reason === 'duplicate') {
        this.o.metrics.duplicateSeen(request.model);
        const queued = this.queued.get(request.id);
        if (queued) {
          queued.duplicates.push({ delivery, replyTo: request.replyTo, meta: request.meta });
          return;
        }
      }
      // Refused on arrival (an older frame than one queued or served, a full queue): its time to
      // get here is still worth reporting, as an expired answer on arrival reports it.
      this.o.answer(delivery, identityOfRequest(request), request.replyTo, { status: 'rejected', error: verdict.error, nowMs, timings: { queuedMs: entry.arrivedAt - request.createdAt }, device: -1 });
      return;
    }
    this.queued.set(request.id, entry.payload);
    if (verdict.superseded !== undefined) this.o.answerSuperseded(verdict.superseded, entry, nowMs);
    if (entry.priority === 0) {
      this.lastUrgent = nowMs;
      this.lastUrgentByLane.set(lane.key, nowMs);
    }
    if (this.seen.has(request.id)) this.o.metrics.duplicateSeen(request.model);
    if (verdict.kind === 'backpressure') this.applyBackpressure(lane);
  }

  /**
   * Queued or on the device here already (a redelivery after a rebalance, a producer's retry):
   * `delivery` takes that one's result instead of a second run on the device. False: not held.
   */
  private rideAlong(request: RequestEnvelope, delivery: Delivery): boolean {
    const held = this.queued.get(request.id);
    if (held === undefined || held.request.model !== request.model || held.request.version !== request.version) return false;
    this.o.metrics.duplicateSeen(request.model);
    held.duplicates.push({ delivery, replyTo: request.replyTo, meta: request.meta });
    return true;
  }

  /**
   * The transport's onRevoked: these deliveries now belong to another worker (their Kafka
   * partition moved in a rebalance), which will answer them. What is still waiting for admission
   * or queued here is dropped without an answer, so the device does not serve it a second time
   * (at scale-out, when it can least afford to); a request whose other deliveries stay here keeps
   * those. What is on the device already finishes and settles as usual. Returns the deliveries
   * dropped (for release) and how many queued requests went with them.
   */
  revoke(deliveryIds: ReadonlySet<string>): { released: Delivery[]; requests: number } {
    const released: Delivery[] = [];
    for (let level = 0; level < this.intake.length; level++) {
      const q = this.intake[level];
      if (q === undefined || q.length === 0) continue;
      this.intake[level] = q.filter((d) => !deliveryIds.has(d.deliveryId) || (released.push(d), false));
    }
    let requests = 0;
    const lanes = this.o.lanes.allLanes();
    for (const [id, payload] of [...this.queued]) {
      const all = [payload.delivery, ...payload.duplicates.map((d) => d.delivery)];
      const gone = all.filter((d) => deliveryIds.has(d.deliveryId));
      if (gone.length === 0) continue;
      if (gone.length === all.length) {
        // Only a queued one is dropped: on the device it runs to the end either way.
        const lane = lanes.find((l) => l.scheduler.remove(id) !== undefined);
        if (lane === undefined) continue;
        this.queued.delete(id);
        released.push(...all);
        requests++;
        this.maybeResume(lane);
        continue;
      }
      // Deliveries from elsewhere stay and get its result. A revoked rider leaves with the
      // partition; a revoked first delivery stays (its settle is the transport's to skip).
      const riders = payload.duplicates.filter((d) => !deliveryIds.has(d.delivery.deliveryId));
      for (const d of payload.duplicates) if (deliveryIds.has(d.delivery.deliveryId)) released.push(d.delivery);
      payload.duplicates.splice(0, payload.duplicates.length, ...riders);
    }
    return { released, requests };
  }

  /** Request `id` is answered (by `delivery`): a later delivery of it is a duplicate, not a rider. */
  answered(id: string, delivery: Delivery, nowMs: number): void {
    this.seen.set(id, nowMs);
    if (this.queued.get(id)?.delivery === delivery) this.queued.delete(id);
    if (this.seen.size > SEEN_IDS_MAX) this.seen.delete(this.seen.keys().next().value as string);
  }

  private applyBackpressure(lane: Lane<Payload>): void {
    if (this.paused.has(lane.key)) return;
    // Lowest priorities first: keep the top level flowing so urgent work is never stuck behind bulk.
    const levels = lane.config.priorityLevels;
    const pause = Array.from({ length: Math.max(1, levels - 1) }, (_, i) => levels - 1 - i).filter((p) => p > 0 || levels === 1);
    this.paused.set(lane.key, pause);
    this.o.transport.pause(lane.config.name, pause);
    const logged = this.backpressureLog(lane.key);
    if (logged !== undefined) this.o.log.info({ model: lane.config.name, priorities: pause, ...logged }, 'backpressure: intake paused');
  }

  /**
   * Under sustained overload intake pauses and resumes several times a second: one line per lane
   * per BACKPRESSURE_LOG_MS, carrying how many pauses it stands for (the queue depth gauges
   * show the rest). Undefined: hold this one back.
   */
  private backpressureLog(key: string, nowMs = Date.now()): { pausesSinceLastLine: number } | undefined {
    const t = this.pauseLog.get(key) ?? { loggedAt: -Infinity, held: 0, resumeLogged: false };
    this.pauseLog.set(key, t);
    if (nowMs - t.loggedAt < BACKPRESSURE_LOG_MS) {
      t.held++;
      return undefined;
    }
    const pausesSinceLastLine = t.held + 1;
    t.loggedAt = nowMs;
    t.held = 0;
    t.resumeLogged = false;
    return { pausesSinceLastLine };
  }

  /** Resumes the lane's paused priorities once its scheduler is below the limits again. */
  maybeResume(lane: Lane<Payload>): void {
    const pausedLevels = this.paused.get(lane.key);
    if (!pausedLevels || lane.scheduler.intakePaused) return;
    this.paused.delete(lane.key);
    this.o.transport.resume(lane.config.name, pausedLevels);
    // Logged with its pause: only the resume after a logged pause (not every flap).
    const t = this.pauseLog.get(lane.key);
    if (t !== undefined && t.held === 0 && !t.resumeLogged) {
      t.resumeLogged = true;
      this.o.log.info({ model: lane.config.name }, 'backpressure released: intake resumed');
    }
  }
}
