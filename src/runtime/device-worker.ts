import { hostname } from 'node:os';
import type { FleetConfig } from '../contracts/fleet-config.ts';
import type { FleetError } from '../errors/fleet-error.ts';
import type { FleetMetrics } from '../observability/metrics.ts';
import type { Logger } from '../observability/logger.ts';
import type { Batch } from '../scheduler/scheduler-types.ts';
import type { PredecessorNote, Transport } from '../transport/transport.ts';
import type { DeviceLike } from './load-checked.ts';
import { ModelLanes, type Lane } from './model-lanes.ts';
import { Answerer } from './answerer.ts';
import type { Payload } from './request-admission.ts';
import { RequestIntake } from './request-intake.ts';
import { BatchRunner } from './batch-runner.ts';
import { timerDelayMs } from './timer-delay.ts';
import { WakeTimer } from './wake-timer.ts';
import { settlesWithin } from '../transport/with-timeout.ts';
import { WorkerClock } from './worker-clock.ts';
import { workerHealth, workerReadiness, type HealthInputs, type WorkerState } from './worker-health.ts';
import { exportWorkerGauges, workerGaugeHooks } from './worker-gauges.ts';
import { CrashSuspects } from './crash-suspects.ts';
import type { CrashHint, InflightJournal } from './inflight-journal.ts';
import type { ModelVersion, RepositorySnapshot } from './model-repository.ts';

export interface DeviceWorkerOptions {
  readonly config: FleetConfig;
  readonly deviceId: number;
  readonly device: DeviceLike;
  readonly transport: Transport;
  readonly metrics: FleetMetrics;
  readonly log: Logger;
  readonly snapshot: RepositorySnapshot;
  /** Called when a batch exceeds the hang limit: the process must stop intake and exit. */
  readonly onHang?: (info: { model: string; gear: number; elapsedMs: number }) => void;
  /** Called when the transport can no longer receive work: the process must drain and exit. */
  readonly onTransportFailure?: (err: FleetError) => void;
  /** Where the ids of the batches in flight are kept for the next worker of this device (crashes). */
  readonly journal?: InflightJournal | undefined;
  /** Requests on the device when the previous worker of this device died, with their suspect counts then (journal). */
  readonly crashHints?: ReadonlyMap<string, CrashHint> | undefined;
  /** Handed to the transport (TransportStartOptions.predecessor). */
  readonly predecessor?: PredecessorNote | undefined;
}

/**
 * After a top-priority request, for this long a lower-priority batch goes to the device only when
 * it is idle: the second slot stays free, so urgent work waits behind at most one bulk batch.
 */
const URGENT_WINDOW_MS = 1000;

/**
 * How long past worker.drainTimeoutMs a drain still waits for the broker (releases, results
 * publishing). The rest of a stop's bounds past the drain timeout: stopPastDrainMs (worker-process.ts).
 */
export const DRAIN_GRACE_MS = 1_000;

/** Just past the moment a queued request of `lane` becomes unreachable (the check is strict). */
const expiryWakeAt = (lane: Lane<Payload>): number => lane.scheduler.nextUnreachableAt() + 1;

/**
 * One device's worker loop (DESIGN §3-§5): deliveries → decode/validate → scheduler → gather →
 * device (two batches in flight) → scatter → results → settle. Intake and admission are
 * RequestIntake's, the device side BatchRunner's, results and their publishing Answerer's; this
 * class runs the scheduling loop between them and owns the lifecycle. Only src/runtime arms
 * timers around the scheduler; the scheduler itself is pure. JS thread only.
 */
export class DeviceWorker {
  readonly workerId: string;
  private state: WorkerState = 'starting';
  private readonly lanes: ModelLanes<Payload>;
  private readonly intake: RequestIntake;
  private readonly runner: BatchRunner;
  private readonly answers: Answerer;
  private readonly crash: CrashSuspects;
  private readonly clock: WorkerClock;
  private readonly wake = new WakeTimer(() => this.pump());
  private pumping = false;
  private pumpAgain = false;
  private idleWaiters: Array<() => void> = [];
  private suspectsRecorded: Promise<void> = Promise.resolve();

  constructor(private readonly o: DeviceWorkerOptions) {
    this.crash = new CrashSuspects({ journal: o.journal, hints: o.crashHints, transport: o.transport, log: o.log });
    this.clock = new WorkerClock((stepMs) => this.clockStepped(stepMs));
    const now = (): number => this.clock.nowMs();
    this.workerId = `${hostname()}/dev${o.deviceId}/${process.pid}`;
    this.lanes = new ModelLanes<Payload>(o.device, o.log, o.config);
    const { config, transport, metrics, log } = o;
    this.intake = new RequestIntake({
      config,
      lanes: this.lanes,
      crash: this.crash,
      transport,
      metrics,
      log,
      running: () => this.state === 'running',
      answer: (delivery, identity, replyTo, b, dlq) => this.answers.answer(delivery, identity, replyTo, b, dlq),
      answerSuperseded: (superseded, by, nowMs) => this.answers.answerSuperseded(superseded, by, nowMs),
      pump: () => this.pump(),
      now,
    });
    this.runner = new BatchRunner({
      config,
      deviceId: o.deviceId,
      lanes: this.lanes,
      crash: this.crash,
      metrics,
      log,
      results: (cfg, results) => this.answers.answerBatch(cfg, results),
      hang: (model, batch, elapsedMs) => this.hang(model, batch, elapsedMs),
      hung: () => this.state === 'hung',
      left: () => this.pump(),
      now,
    });
    this.answers = new Answerer({
      transport,
      metrics,
      log,
      publishLingerMs: config.worker.publishLingerMs,
      ctx: { worker: this.workerId, device: o.deviceId },
      serves: (model) => this.lanes.serves(model),
      answered: (id, delivery, nowMs) => this.intake.answered(id, delivery, nowMs),
    });
  }

  get status(): WorkerState {
    return this.state;
  }

  get ready(): boolean {
    return this.state === 'running';
  }

  /** For /readyz and the ready gauge (see workerReadiness). */
  readiness(): { ready: true } | { ready: false; reason: string } {
    return workerReadiness(this.healthInputs());
  }

  /** For /healthz (liveness, see workerHealth). */
  health(nowMs = Date.now()): { healthy: true } | { healthy: false; reason: string } {
    return workerHealth(this.healthInputs(), nowMs);
  }

  private healthInputs(): HealthInputs {
    const brokerConnected = this.o.transport.connected();
    return {
      state: this.state,
      brokerConnected,
      brokerUnreadyReason: brokerConnected ? undefined : this.o.transport.unreadyReason?.(),
      failing: this.runner.deviceFailing,
      hangLimitMs: this.o.config.worker.hangLimitMs,
    };
  }

  get inflightBatches(): number {
    return this.runner.inflight;
  }

  async start(): Promise<void> {
    await this.lanes.apply(this.o.snapshot, { onLoadFailure: (model) => this.o.metrics.modelLoadFailed(model) });
    await this.o.transport.start({
      subscriptions: this.lanes.subscriptions(),
      onDeliveries: (deliveries) => this.intake.push(deliveries),
      onRevoked: (deliveryIds) => {
        const { released, requests } = this.intake.revoke(deliveryIds);
        if (released.length === 0) return;
        this.o.log.info({ dropped: requests, revoked: deliveryIds.size }, 'rebalance: queued requests of partitions now owned by another worker dropped (it answers them)');
        this.o.transport.release(released).catch((err: unknown) => this.o.log.warn({ err }, 'releasing revoked deliveries failed; their new owner answers them anyway'));
        this.pump();
      },
      onFatal: (err) => this.transportFailed(err),
      onAnswered: (model, dlqReason) => {
        // Its dead-letter reason is its failed result's error code (WORKER_CRASHED).
        this.o.metrics.observeResult(model, 'failed', undefined, undefined, dlqReason);
        this.o.metrics.deadLettered(model, dlqReason);
      },
      ...(this.o.predecessor === undefined ? {} : { predecessor: this.o.predecessor }),
    });
    if (this.state === 'starting') this.state = 'running';
    this.o.log.info({ models: this.lanes.subscriptions().map((s) => s.model) }, 'worker running');
  }

  /**
   * No more work will arrive (the broker refused the consumer for good). What is held locally
   * still runs and settles while the process drains; the supervisor starts a fresh worker.
   */
  private transportFailed(err: FleetError): void {
    if (this.state !== 'running' && this.state !== 'starting') return;
    this.state = 'failed';
    this.o.log.fatal({ err }, 'the transport can no longer receive work; draining and exiting for a restart');
    this.o.onTransportFailure?.(err);
  }

  /** Hot reload: load added versions, switch new batches to them, drain and unload removed ones. */
  async applySnapshot(snapshot: RepositorySnapshot): Promise<void> {
    const runsOn = (lane: Lane<Payload>): unknown => {
      try {
        return lane.current();
      } catch {
        return undefined;
      }
    };
    const before = new Map(this.lanes.allLanes().map((lane) => [lane, runsOn(lane)]));
    const newModels = await this.lanes.apply(snapshot, { reload: true, onLoadFailure: (model) => this.o.metrics.modelLoadFailed(model) });
    // A lane now running another version: the old one's device times are guesses, not facts.
    for (const [lane, version] of before) if (runsOn(lane) !== version) lane.scheduler.estimatesStale();
    if (newModels.length > 0) this.o.log.info({ models: newModels }, 'new models in repository; restart workers to subscribe to them');
    this.pump();
  }

  /** The versions each model serves now (loaded, not draining). */
  servedVersions(): Array<{ model: string; version: string }> {
    return this.lanes.servedVersions();
  }

  /** Whether `v` is loaded here from other bytes than its file holds now (replaced in place; see ModelLanes). */
  loadedFromOtherBytes(v: ModelVersion): boolean {
    return this.lanes.loadedFromOtherBytes(v);
  }

  /** Whether a reload poll has anything to do beyond the repository diff (see ModelLanes). */
  reloadPending(snapshot: RepositorySnapshot): boolean {
    return this.lanes.hasRetryableFailures(snapshot);
  }

  // ---- scheduling loop ----------------------------------------------------------------------

  private pump(): void {
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    this.pumping = true;
    try {
      do {
        this.pumpAgain = false;
        this.pumpOnce();
      } while (this.pumpAgain);
    } finally {
      this.pumping = false;
    }
    if (this.lanes.retiring) {
      void this.lanes.retireIdle().catch((err: unknown) => this.o.log.error({ err }, 'unloading a drained model version failed'));
    }
    if (this.runner.inflight === 0 && this.crash.pending === 0 && this.lanes.queuedRequests() === 0 && !this.intake.waiting) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }

  private pumpOnce(): void {
    const nowMs = this.clock.nowMs();
    let nextWake = Infinity;
    // A suspect has the device to itself: if it takes the worker down again, it alone is blamed.
    const maxInflight = this.crash.suspectOnDevice ? 0 : this.o.config.worker.inflightPerDevice;
    // Lanes led by overdue work first (aging: it goes before all other work), then lanes with
    // top-priority work (the rotation kept within each group): a bulk batch of the lane the
    // rotation starts at would otherwise take the idle device ahead of urgent work ready at the
    // same instant in another lane.
    const lanes = this.lanes.orderedLanes(nowMs);
    const rank = new Map(lanes.map((l) => [l, l.scheduler.leadsOverdue(nowMs) ? 2 : l.scheduler.queuedAtLevel(0) > 0 ? 1 : 0]));
    lanes.sort((a, b) => (rank.get(b) as number) - (rank.get(a) as number));
    for (const lane of lanes) {
      if (this.state === 'hung') break;
      // Read per lane: a batch an earlier lane just dispatched occupies the device first.
      const freeAt = this.runner.freeAt(nowMs);
      const inflight = this.runner.inflight;
      const leadMs = this.runner.leadMs;
      // A batch past its estimated end is often done already, its completion not yet delivered by
      // the event loop: the device counts as about to free up, so the next batch still overlaps it;
      // the deadline checks count from its projected end (freeAt).
      const deviceBusy = inflight > 0 && freeAt - nowMs > leadMs && !this.runner.overrunning(nowMs);
      const urgentActive = nowMs - this.intake.lastUrgentAt < URGENT_WINDOW_MS;
      const holdForUrgent = inflight > 0 && urgentActive;
      // Overdue work is not held either when the urgent traffic is another lane's: that traffic
      // keeps the device busy and would starve it past its aging bound. (A lane's own urgent work
      // brings it to decide, where the overdue request leads.) While a lower-priority batch is in
      // flight it waits, so urgent work still waits behind at most one.
      const overdue = rank.get(lane) === 2 && this.runner.bulkInflight === 0 && nowMs - this.intake.lastUrgentAtOf(lane.key) >= URGENT_WINDOW_MS;
      if (inflight < maxInflight && (deviceBusy || holdForUrgent) && lane.scheduler.queuedAtLevel(0) === 0 && !overdue) {
        // The device is busy: a batch sent now would only wait on the device, and would hold the
        // second slot that urgent work needs. Keep collecting until just before the device frees
        // up (the lead covers copy-in) or, while urgent traffic flows, until it is idle (a
        // completion pumps again); top-priority work goes at once.
        this.answers.answerExpired(lane.scheduler.collectExpired(nowMs, freeAt), nowMs);
        // (Not while urgent traffic flows, nor while the batch overruns: deviceBusy is then false.)
        if (!holdForUrgent) nextWake = Math.min(nextWake, freeAt - leadMs);
        nextWake = Math.min(nextWake, expiryWakeAt(lane));
      } else if (inflight < maxInflight) {
        // Urgent work going to a busy device, or while urgent traffic flows, travels without
        // low-priority filler: a batch filled up to the largest gear would cost it twice the
        // device time of its own short batch.
        const d = lane.scheduler.decide(nowMs, freeAt, deviceBusy || urgentActive ? 0 : Infinity);
        this.answers.answerExpired(d.expired, nowMs);
        if (d.kind === 'dispatch') {
          this.runner.dispatch(lane, d.batch, nowMs);
          this.pumpAgain = true;
        } else if (d.kind === 'wait') nextWake = Math.min(nextWake, d.untilAt);
      } else {
        this.answers.answerExpired(lane.scheduler.collectExpired(nowMs, freeAt), nowMs);
        // Both slots are taken and a batch may overrun: answer deadlines as they pass, not at its end.
        nextWake = Math.min(nextWake, expiryWakeAt(lane));
      }
      this.intake.maybeResume(lane);
    }
    this.wake.arm(nextWake, nowMs);
  }

  /**
   * The wall clock stepped (WorkerClock): queued requests keep their delays in real time, the batch
   * on the device its estimated end, and the armed wake is re-armed (its time, on the wall clock, may
   * now be due sooner).
   */
  private clockStepped(stepMs: number): void {
    this.o.log.warn({ stepMs }, 'the wall clock stepped; queue delays keep counting real time, deadlines follow the wall clock');
    for (const lane of this.lanes.allLanes()) lane.scheduler.clockStepped(stepMs);
    this.runner.clockStepped(stepMs);
    this.wake.invalidate();
  }

  /**
   * The first batch past the hang limit is the one on the device (the second waits behind it): its
   * requests are recorded as suspects (CrashSuspects.hung) before the worker exits, so a poison
   * input runs alone next time and is quarantined at worker.maxHangsPerRequest instead of crash-looping.
   */
  private hang(model: string, batch: Batch<Payload>, elapsedMs: number): void {
    if (this.state === 'hung') return;
    this.state = 'hung';
    const gear = batch.gear;
    this.o.log.fatal({ model, gear, elapsedMs, hangLimitMs: this.o.config.worker.hangLimitMs }, 'device hang: stopping intake; unacked requests will be redelivered');
    this.suspectsRecorded = this.crash.hung(batch.members.flatMap((m) => [m.payload.delivery, ...m.payload.duplicates.map((d) => d.delivery)]), model);
    void this.o.transport.stopIntake().catch(() => {});
    this.o.onHang?.({ model, gear, elapsedMs });
  }

  /** Settles once the hung batch's requests are recorded as suspects (see hang). */
  get hangRecorded(): Promise<void> {
    return this.suspectsRecorded;
  }

  // ---- lifecycle ----------------------------------------------------------------------------

  /** Queue depth per model/priority, device memory in use and source lag, for the metrics edge. */
  exportGauges(): Promise<void> {
    return exportWorkerGauges(this.lanes, this.o);
  }

  /** The same gauges as scrape hooks to register one by one (see workerGaugeHooks). */
  gaugeHooks(): Array<() => void | Promise<void>> {
    return workerGaugeHooks(this.lanes, this.o);
  }

  /**
   * SIGTERM path: stop intake → finish queued and in-flight batches → publish → ack → close.
   * Whatever is still queued when the drain timeout hits is released back to the broker.
   */
  async drain(timeoutMs = this.o.config.worker.drainTimeoutMs): Promise<{ released: number; timedOut: boolean }> {
    if (this.state === 'stopped') return { released: 0, timedOut: false };
    this.state = 'draining';
    let timedOut = false;
    // One deadline for the whole drain: a broker that does not answer stopIntake must not hold the
    // drain past it (deliveries arriving meanwhile are released, as the state is no longer running).
    const deadline = new Promise<void>((r) => setTimeout(() => ((timedOut = true), r()), timerDelayMs(timeoutMs)).unref());
    const stopped = this.o.transport.stopIntake().catch((err: unknown) => this.o.log.warn({ err }, 'stopping intake failed; draining anyway'));
    await Promise.race([stopped, deadline]);
    const idle = new Promise<void>((resolve) => {
      this.idleWaiters.push(resolve);
      this.pump();
    });
    await Promise.race([idle, deadline]);
    let released = 0;
    // Past the deadline the broker gets a short grace, never more: with it away, a release or a
    // publish waits for it (BullMQ: forever; Kafka: minutes of retries), and the stop with them.
    const grace = deadline.then(() => new Promise<'late'>((r) => setTimeout(() => r('late'), DRAIN_GRACE_MS).unref()));
    if (timedOut) {
      const leftovers = this.lanes.drainQueued();
      released = leftovers.length;
      const releasing = this.o.transport.release(leftovers.flatMap((r) => [r.payload.delivery, ...r.payload.duplicates.map((d) => d.delivery)]));
      releasing.catch(() => undefined);
      await Promise.race([releasing, grace]);
    }
    // Results still publishing when the bound (and its grace) is over stay unacked: the broker
    // redelivers their requests, as it does the queued ones released above.
    const published = this.answers.close().then(() => 'published' as const, () => 'published' as const);
    if ((await Promise.race([published, grace])) === 'late') {
      timedOut = true;
      this.o.log.warn({ drainTimeoutMs: timeoutMs }, 'results not published within the drain bound (broker away?); their requests stay unacked and are redelivered');
    }
    this.wake.cancel();
    // A hang during the drain took over: the state stays 'hung' (the caller must not unload what
    // the hung batch uses) and the journal stays as hang() left it (emptied once the broker holds
    // the counts: rewriting it would count the hang twice).
    if (this.status === 'hung') return { released, timedOut };
    this.state = 'stopped';
    this.crash.record();
    return { released, timedOut };
  }

  /**
   * start() failed (a model that does not load, a broker that refuses the consumer): nothing was
   * delivered, so there is nothing to drain; unloads what was loaded and closes the transport,
   * leaving the device to its owner to close.
   */
  async abandonStart(): Promise<void> {
    this.state = 'stopped';
    await this.lanes.unloadAll();
    await this.o.transport.close();
  }

  /**
   * `transportWithinMs`: how long to wait for the transport's close (a drain that timed out,
   * maybe for a broker that is away: closing waits for it too, Kafka for minutes of retries); past
   * it the close goes on without the stop, and what it did not commit is redelivered.
   */
  async close(transportWithinMs?: number): Promise<void> {
    if (this.state !== 'stopped' && this.state !== 'hung') await this.drain();
    await this.lanes.unloadAll();
    const closing = this.o.transport.close();
    if (transportWithinMs !== undefined && !(await settlesWithin(closing, transportWithinMs))) {
      closing.catch(() => undefined);
      this.o.log.warn({ waitedMs: transportWithinMs }, 'closing the transport after the drain timed out is taking long (broker away?); stopping without it');
      return;
    }
    await closing;
  }
}
