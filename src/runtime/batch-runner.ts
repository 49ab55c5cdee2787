import type { FleetConfig } from '../contracts/fleet-config.ts';
import type { ModelConfig } from '../contracts/model-config.ts';
import { FleetError } from '../errors/fleet-error.ts';
import type { BatchOutcome, FleetMetrics } from '../observability/metrics.ts';
import type { Logger } from '../observability/logger.ts';
import { DeviceTimeline } from '../scheduler/device-timeline.ts';
import type { Batch } from '../scheduler/scheduler-types.ts';
import { gatherInputs, scatterOutputs } from './batch-io.ts';
import { failedBatchResults, finishedBatchResults, type MemberResult } from './batch-results.ts';
import type { CrashSuspects, JournaledBatch } from './crash-suspects.ts';
import type { Lane, LoadedVersion, ModelLanes } from './model-lanes.ts';
import type { Payload } from './request-admission.ts';
import { timerDelayMs } from './timer-delay.ts';
import { monoNowMs } from './worker-clock.ts';

/** How long before the device frees up the next batch is formed, so its copy-in overlaps. */
const PIPELINE_LEAD_MS = 1;
/**
 * Batches failed by the device one after another, with none succeeding between them, that make
 * the worker report the device as failing (/readyz): one is a bad batch (a poison input), a run of
 * them a device that cannot deliver.
 */
export const DEVICE_FAILING_BATCHES = 3;
/** Failures of the device itself; an input the model refuses (INVALID_ARGUMENT) is not one. */
const DEVICE_FAULTS: ReadonlySet<string> = new Set(['DEVICE_ERROR', 'DEVICE_TIMEOUT', 'DEVICE_OUT_OF_MEMORY']);

export interface BatchRunnerOptions {
  readonly config: FleetConfig;
  readonly deviceId: number;
  readonly lanes: ModelLanes<Payload>;
  readonly crash: CrashSuspects;
  readonly metrics: FleetMetrics;
  readonly log: Logger;
  /** A batch's results, member by member (Answerer.answerBatch). */
  readonly results: (cfg: ModelConfig, results: readonly MemberResult[]) => void;
  /** A batch is past worker.hangLimitMs on the device (DeviceWorker.hang). */
  readonly hang: (model: string, batch: Batch<Payload>, elapsedMs: number) => void;
  /** Whether a hang took over: the journal then stays as the hang left it. */
  readonly hung: () => boolean;
  /** A batch left the device: the scheduling loop runs again. */
  readonly left: () => void;
  /** The worker's clock (WorkerClock.nowMs): completion times go into the device timeline. @defaultValue Date.now */
  readonly now?: () => number;
}

/**
 * The device side of a worker (DESIGN §5): a dispatched batch is gathered, executed (two in
 * flight), watched for overrun and hang, scattered and its results handed back. Keeps the device
 * timeline the scheduling loop paces dispatch by: batches in flight, when the device frees up, how
 * early the next batch must be formed. Runs on the JS thread; the device executes on its own
 * native thread, which owns the gathered input buffers until execute settles.
 */
export class BatchRunner {
  private inflightBatches = 0;
  /** Batches in flight led by lower-priority (level > 0) work. */
  private bulkBatches = 0;
  /** The batches in flight by their estimates: when the device frees up. */
  private readonly timeline = new DeviceTimeline();
  /** Recent host→device copy time: how early the next batch must be formed to overlap it. */
  private copyInEwmaMs = 0;
  /** When the device last finished a batch (step-free clock): a batch's service time starts no earlier. */
  private lastCompletionAt = 0;
  /** The clock steps reported (clockStepped): service times are measured on the clock minus these. */
  private steppedMs = 0;
  /** Settles when the batch dispatched last has left the device: the next one starts on it then. */
  private lastLeft: Promise<void> = Promise.resolve();
  /** Batches the device failed since it last completed one, and the last failure. */
  private failedInARow = 0;
  private lastFault: FleetError | undefined;
  /** When the first of those failed (epoch ms). */
  private failingSince = 0;

  constructor(private readonly o: BatchRunnerOptions) {}

  private readonly now = (): number => (this.o.now ?? Date.now)();

  /** The worker's clock jumped by `stepMs` without that much time passing (WorkerClock). */
  clockStepped(stepMs: number): void {
    this.timeline.clockStepped(stepMs);
    this.steppedMs += stepMs;
  }

  get inflight(): number {
    return this.inflightBatches;
  }

  /** Batches in flight led by lower-priority work (not priority 0). */
  get bulkInflight(): number {
    return this.bulkBatches;
  }

  /** When the device is expected to be free: now when nothing is in flight, else at least leadMs from now. */
  freeAt(nowMs: number): number {
    return this.timeline.freeAt(nowMs, this.leadMs);
  }

  /** Whether the batch on the device has run past its estimated end: only its completion tells when it frees up. */
  overrunning(nowMs: number): boolean {
    return this.timeline.overrunning(nowMs);
  }

  /**
   * The device's failure while its last DEVICE_FAILING_BATCHES batches or more all failed on it,
   * and since when (the first of them); else undefined.
   */
  get deviceFailing(): { readonly batches: number; readonly error: FleetError; readonly sinceMs: number } | undefined {
    return this.failedInARow >= DEVICE_FAILING_BATCHES && this.lastFault !== undefined
      ? { batches: this.failedInARow, error: this.lastFault, sinceMs: this.failingSince }
      : undefined;
  }

  /** `executeMs` the device reported, undefined when it reported none (a rejected execute). */
  private countBatch(model: string, batch: Batch<Payload>, outcome: BatchOutcome, executeMs: number | undefined): void {
    this.o.metrics.observeBatch({
      model,
      device: this.o.deviceId,
      gear: batch.gear,
      items: batch.items,
      padded: batch.paddedItems,
      boundLength: batch.boundLength,
      paddedLengthSlots: batch.paddedLengthSlots,
      outcome,
      executeSeconds: executeMs === undefined ? undefined : executeMs / 1000,
    });
  }

  private runsOn(lane: Lane<Payload>, version: LoadedVersion): boolean {
    try {
      return lane.current() === version;
    } catch {
      return false;
    }
  }

  /** How long before freeAt the next batch is formed (covers its copy-in). */
  get leadMs(): number {
    return Math.max(PIPELINE_LEAD_MS, this.copyInEwmaMs);
  }

  dispatch(lane: Lane<Payload>, batch: Batch<Payload>, nowMs: number): void {
    const version = lane.current();
    this.inflightBatches++;
    const bulk = (batch.members[0]?.priority ?? 0) > 0;
    if (bulk) this.bulkBatches++;
    version.inflight++;
    this.timeline.dispatched(batch.estimatedDeviceMs, nowMs);
    const journaled = this.o.crash.started(batch.members.flatMap((m) => [m.payload.delivery, ...m.payload.duplicates.map((d) => d.delivery)]));
    this.o.metrics.setBatchesInFlight(this.o.deviceId, this.inflightBatches);
    const ahead = this.lastLeft;
    let left = (): void => {};
    const settled = new Promise<void>((resolve) => (left = resolve));
    // Left the device: settled, and the batch ahead has left (one that failed at once did not hold it).
    this.lastLeft = ahead.then(() => settled);
    void this.run(lane, version, batch, nowMs, monoNowMs(), journaled, ahead, () => {
      if (bulk) this.bulkBatches--;
      left();
    });
  }

  private async run(
    lane: Lane<Payload>,
    version: LoadedVersion,
    batch: Batch<Payload>,
    dispatchedAt: number,
    dispatchedMonoMs: number,
    journaled: JournaledBatch,
    ahead: Promise<void>,
    left: () => void,
  ): Promise<void> {
    const cfg = lane.config;
    // Service time is taken on the step-free clock: a step back across the batch made it negative,
    // clamped to 0.01 ms and learnt as the gear's device time.
    const dispatchedSince = dispatchedAt - this.steppedMs;
    let overran = false;
    let settled = false;
    let execTimer: NodeJS.Timeout | undefined;
    let hangTimer: NodeJS.Timeout | undefined;
    // Both limits count from when the batch starts on the device, once the batch ahead of it has
    // left: the second batch in flight is not late, nor hung, for the time it waited behind the first.
    void ahead.then(() => {
      if (settled) return;
      // Monotonic: the elapsed time the hang reports must not take in a wall-clock step.
      const startedMonoMs = monoNowMs();
      execTimer = setTimeout(() => {
        overran = true;
        this.o.log.warn({ model: cfg.name, gear: batch.gear, execTimeoutMs: cfg.execTimeoutMs }, 'batch overran execTimeoutMs; letting it finish');
      }, timerDelayMs(cfg.execTimeoutMs));
      hangTimer = setTimeout(() => this.o.hang(cfg.name, batch, monoNowMs() - startedMonoMs), timerDelayMs(this.o.config.worker.hangLimitMs));
    });
    const members = batch.members.map((m) => m.payload.request);
    // Only a failure of the execute itself counts against the device (not gather or scatter on the host).
    let onDevice = false;
    // The device was given the batch: it is counted in the batch metrics, whatever becomes of it.
    let given = false;
    let counted = false;
    let executeMs: number | undefined;
    try {
      // A suspect has the device to itself (CrashSuspects): it starts once the batches ahead left.
      if (journaled.suspect) await ahead;
      const inputs = gatherInputs(members, cfg, batch);
      onDevice = true;
      given = true;
      const { outputs, timings } = await version.executable.execute(inputs, batch.gear);
      executeMs = timings.executeMs;
      const doneAt = this.now();
      const deviceMs = timings.copyInMs + timings.executeMs + timings.copyOutMs;
      this.copyInEwmaMs = this.copyInEwmaMs * 0.8 + timings.copyInMs * 0.2;
      onDevice = false;
      this.failedInARow = 0;
      const perRequest = scatterOutputs(outputs, cfg, batch);
      counted = true;
      this.countBatch(cfg.name, batch, 'ok', timings.executeMs);
      // Service time, not latency: the second batch in flight waits for the first on the device,
      // and that wait must not inflate the learnt per-gear estimate.
      const doneSince = doneAt - this.steppedMs;
      const serviceMs = Math.max(0.01, doneSince - Math.max(dispatchedSince, this.lastCompletionAt));
      this.lastCompletionAt = doneSince;
      // Only the version the lane runs now teaches its estimates (a reload may have switched it).
      if (this.runsOn(lane, version)) lane.scheduler.recordCompletion(batch.gear, Math.min(serviceMs, deviceMs), doneAt);
      this.o.results(cfg, finishedBatchResults(batch, cfg, { perRequest, version: version.version, dispatchedMonoMs, doneAt, deviceMs, executeMs: timings.executeMs, overran }));
    } catch (err) {
      const fe = FleetError.from(err, 'DEVICE_ERROR');
      if (onDevice && DEVICE_FAULTS.has(fe.code)) {
        if (this.failedInARow++ === 0) this.failingSince = Date.now();
        this.lastFault = fe;
      }
      this.o.log.error({ err: fe, model: cfg.name, gear: batch.gear }, 'batch failed');
      if (given && !counted) this.countBatch(cfg.name, batch, 'failed', executeMs);
      this.o.results(cfg, failedBatchResults(batch, version.version, fe, Date.now(), dispatchedMonoMs));
    } finally {
      settled = true;
      clearTimeout(execTimer);
      clearTimeout(hangTimer);
      left();
      this.inflightBatches--;
      version.inflight--;
      this.o.crash.finished(journaled, !this.o.hung());
      // Re-anchor on what is really left: the next batch in flight starts on the device now.
      this.timeline.left(this.now());
      this.o.metrics.setBatchesInFlight(this.o.deviceId, this.inflightBatches);
      await this.o.lanes.retireIfIdle(version);
      this.o.left();
    }
  }
}
