import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { MAX_PRIORITY_LEVELS } from '../contracts/request-envelope.ts';
import { deferredCounter, type DeferredCount } from './deferred-count.ts';
import { ListedGauge } from './listed-gauge.ts';
import { LocalHistogram } from './local-histogram.ts';
import {
  BATCH_SIZE_BUCKETS,
  DEVICE_EXECUTE_BUCKETS_SECONDS,
  FLEET_METRICS,
  LATENCY_BUCKETS_SECONDS,
  PADDING_RATIO_BUCKETS,
  PROCESS_METRICS_PREFIX,
  isUnserved,
  unservedCodeLabel,
  type BatchOutcome,
  type DeadlineStage,
  type MetricDefinition,
  type RequestStatus,
  type SourceTransport,
  type WasteReason,
} from './metric-definitions.ts';

// Importers of this module predate the split into metric-definitions.ts.
export * from './metric-definitions.ts';

/**
 * All npu-fleet metrics. Each FleetMetrics owns its own Registry (never prom-client's global one) so
 * several instances in one process (tests, an embedded fleet) do not collide. Label sets are fixed
 * and bounded — model, version, priority, status, code, device, gear, stage, transport, reason, outcome — never
 * request ids. The runtime calls the typed helpers at its edges; core modules hold no metrics.
 */

export interface FleetMetricsOptions {
  /**
   * prom-client default metrics (CPU, memory, GC, event-loop lag — how a native call blocking the
   * loop shows up) with PROCESS_METRICS_PREFIX. Default true.
   */
  processMetrics?: boolean;
  /** Constant labels on every series, e.g. `{ worker: 'device-0' }`. Keep them bounded. */
  defaultLabels?: Record<string, string>;
  /** Buckets of the end-to-end latency and queue wait histograms; default LATENCY_BUCKETS_SECONDS. */
  latencyBucketsSeconds?: readonly number[];
  /**
   * How long a scrape waits for its onScrape hooks; default 2000. Some read the broker (source lag),
   * and a broker read during an outage waits for the broker (a BullMQ connection retries forever):
   * an unbounded wait would time the whole scrape out and hide every metric just then.
   */
  scrapeHookTimeoutMs?: number;
}

export const SCRAPE_HOOK_TIMEOUT_MS = 2000;

export interface BatchObservation {
  model: string;
  device: number | string;
  /** The gear (compiled batch size) the batch was padded to. */
  gear: number;
  /** Real items (samples) in the batch. */
  items: number;
  /** Padding items added; default `max(0, gear - items)`. */
  padded?: number;
  /** A bucketed model's bucket bound, which every sample's variable axis is padded to; absent or null when not bucketed. */
  boundLength?: number | null;
  /** Positions of that axis padded up to the bound in the real items: Σ items × (bound − length). */
  paddedLengthSlots?: number;
  /** Default ok. */
  outcome?: BatchOutcome;
  /** The execute alone; undefined when the device reported no time (a rejected execute). */
  executeSeconds: number | undefined;
}

/** One model's local queue at a scrape, summed over its lanes (a lane per pinned version). */
export interface LocalQueueReading {
  /** Requests queued, by priority level. */
  readonly depthByPriority: ReadonlyMap<number, number>;
  /** Host memory the queued request messages hold. */
  readonly bytes: number;
  /** Seconds since the oldest queued request of each non-empty level reached this worker; an empty level is left out. */
  readonly oldestAgeSecondsByPriority?: ReadonlyMap<number, number>;
}

/**
 * One model's backlog in device seconds at a scrape (see FLEET_METRICS.backlogSeconds). Only for a
 * model whose cost is measured: a model without one has no reading, and leaves the gauges.
 */
export interface BacklogReading {
  /** Learnt device seconds per request at full batches (npu_fleet_device_seconds_per_request). */
  readonly deviceSecondsPerRequest: number;
  /** Device seconds of this worker's local queue (its queued items at their lanes' costs). */
  readonly localSeconds: number;
  /** Requests waiting in the broker (npu_fleet_source_lag); undefined while unknown, which leaves the source part and the total out. */
  readonly sourceLag?: number | undefined;
  /**
   * The lag counts this worker's queued requests already (Kafka: it runs from the group's committed
   * offsets, and what the worker holds is not committed yet): the total is then the larger of the
   * two parts, not their sum, which would count the queue twice.
   */
  readonly sourceLagHoldsLocal?: boolean | undefined;
}

type Hook = () => void | Promise<void>;

export class FleetMetrics {
  readonly registry: Registry;
  /** npu_fleet_requests_total and npu_fleet_unserved_total: counted per request, see DeferredCount. */
  private readonly requests: (labels: { model: string; status: string }) => DeferredCount<'model' | 'status'>;
  private readonly unserved: (labels: { model: string; status: string; code: string }) => DeferredCount<'model' | 'status' | 'code'>;
  private readonly endToEnd: LocalHistogram<'model' | 'priority'>;
  private readonly queueWait: LocalHistogram<'model' | 'priority'>;
  /**
   * Per-request series resolved once per label set: prom-client hashes the label object on every
   * observe(labels, v), which costs more than the observation itself at thousands per second.
   */
  private readonly children = new Map<string, unknown>();
  private readonly batchSize: Histogram<'model'>;
  private readonly paddingRatio: Histogram<'model'>;
  private readonly paddedItems: Counter<'model'>;
  private readonly batchSlots: Counter<'model'>;
  private readonly paddedSlots: Counter<'model'>;
  private readonly batches: Counter<'model' | 'device' | 'gear' | 'outcome'>;
  private readonly deviceExecute: Histogram<'model' | 'device' | 'gear'>;
  private readonly inFlight: Gauge<'device'>;
  private readonly deviceMemoryUsed: Gauge<'device'>;
  private readonly queueDepth: ListedGauge<'model' | 'priority'>;
  private readonly queueBytes: ListedGauge<'model'>;
  private readonly sourceLag: ListedGauge<'model' | 'transport'>;
  private readonly oldestQueuedAge: ListedGauge<'model' | 'priority'>;
  private readonly deviceSecondsPerRequest: ListedGauge<'model'>;
  private readonly localBacklog: ListedGauge<'model'>;
  private readonly sourceBacklog: ListedGauge<'model'>;
  private readonly backlog: ListedGauge<'model'>;
  private readonly deadlineMisses: Counter<'model' | 'stage'>;
  private readonly wasted: Counter<'model' | 'reason'>;
  private readonly restarts: Counter<'device'>;
  private readonly ready: Gauge;
  private readonly starting: Gauge;
  private readonly duplicates: Counter<'model'>;
  private readonly dlqs: Counter<'model' | 'reason'>;
  private readonly loadFailures: Counter<'model'>;
  private readonly versionServed: ListedGauge<'model' | 'version'>;
  private readonly slowScans: Counter;
  private readonly hooks: Hook[] = [];
  /** Hooks still running from an earlier scrape: not started again until they settle. */
  private readonly running = new Map<Hook, Promise<void>>();
  private readonly hookTimeoutMs: number;

  constructor(options: FleetMetricsOptions = {}) {
    this.registry = new Registry();
    this.hookTimeoutMs = options.scrapeHookTimeoutMs ?? SCRAPE_HOOK_TIMEOUT_MS;
    if (options.defaultLabels) this.registry.setDefaultLabels(options.defaultLabels);
    if (options.processMetrics ?? true) {
      collectDefaultMetrics({ register: this.registry, prefix: PROCESS_METRICS_PREFIX });
    }
    const registers = [this.registry];
    const latency = [...(options.latencyBucketsSeconds ?? LATENCY_BUCKETS_SECONDS)];
    const m = FLEET_METRICS;
    const counter = <L extends string>(d: MetricDefinition & { labels: readonly L[] }) =>
      new Counter<L>({ name: d.name, help: d.help, labelNames: d.labels, registers });
    const gauge = <L extends string>(d: MetricDefinition & { labels: readonly L[] }) =>
      new Gauge<L>({ name: d.name, help: d.help, labelNames: d.labels, registers });
    const histogram = <L extends string>(d: MetricDefinition & { labels: readonly L[] }, buckets: readonly number[]) =>
      new Histogram<L>({ name: d.name, help: d.help, labelNames: d.labels, buckets: [...buckets], registers });

    const deferred = <L extends string>(d: MetricDefinition & { labels: readonly L[] }) =>
      deferredCounter<L>((collect) => new Counter<L>({ name: d.name, help: d.help, labelNames: d.labels, registers, collect })).series;
    this.requests = deferred(m.requests);
    this.unserved = deferred(m.unserved);
    // Observed once or twice per request: the cheap local kind (see LocalHistogram).
    const perRequest = <L extends string>(d: MetricDefinition & { labels: readonly L[] }) =>
      new LocalHistogram<L>(d.name, d.help, d.labels, latency, this.registry);
    this.endToEnd = perRequest(m.endToEndLatency);
    this.queueWait = perRequest(m.queueWait);
    this.batchSize = histogram(m.batchSize, BATCH_SIZE_BUCKETS);
    this.paddingRatio = histogram(m.batchPaddingRatio, PADDING_RATIO_BUCKETS);
    this.paddedItems = counter(m.paddedItems);
    this.batchSlots = counter(m.batchSlots);
    this.paddedSlots = counter(m.paddedSlots);
    this.batches = counter(m.batches);
    this.deviceExecute = histogram(m.deviceExecute, DEVICE_EXECUTE_BUCKETS_SECONDS);
    this.inFlight = gauge(m.batchesInFlight);
    this.deviceMemoryUsed = gauge(m.deviceMemoryUsed);
    this.queueDepth = new ListedGauge(gauge(m.localQueueDepth));
    this.queueBytes = new ListedGauge(gauge(m.localQueueBytes));
    this.sourceLag = new ListedGauge(gauge(m.sourceLag));
    this.oldestQueuedAge = new ListedGauge(gauge(m.oldestQueuedAge));
    this.deviceSecondsPerRequest = new ListedGauge(gauge(m.deviceSecondsPerRequest));
    this.localBacklog = new ListedGauge(gauge(m.localBacklogSeconds));
    this.sourceBacklog = new ListedGauge(gauge(m.sourceBacklogSeconds));
    this.backlog = new ListedGauge(gauge(m.backlogSeconds));
    this.deadlineMisses = counter(m.deadlineMisses);
    this.wasted = counter(m.wastedDeviceSeconds);
    this.restarts = counter(m.workerRestarts);
    this.ready = new Gauge({ name: m.workerReady.name, help: m.workerReady.help, registers });
    this.starting = new Gauge({ name: m.workerStarting.name, help: m.workerStarting.help, registers });
    this.duplicates = counter(m.duplicates);
    this.dlqs = counter(m.dlq);
    this.loadFailures = counter(m.modelLoadFailures);
    this.versionServed = new ListedGauge(gauge(m.modelVersionServed));
    this.slowScans = new Counter({ name: m.repositorySlowScans.name, help: m.repositorySlowScans.help, registers });
    this.ready.set(0);
  }

  /**
   * One request's outcome. `e2eSeconds` (createdAt → result published) is observed when given and
   * finite; rejected/invalid requests often have no trustworthy createdAt, so it is optional.
   * `errorCode` is the result's `error.code`: an unserved result is counted by it here, in the same
   * call as npu_fleet_requests_total, so the two never disagree.
   */
  observeResult(model: string, status: RequestStatus, e2eSeconds?: number, priority?: number, errorCode?: string): void {
    this.child(`r\u0000${model}\u0000${status}`, () => this.requests({ model, status })).inc();
    if (isUnserved(status)) {
      const code = unservedCodeLabel(errorCode);
      this.child(`u\u0000${model}\u0000${status}\u0000${code}`, () => this.unserved({ model, status, code })).inc();
    }
    if (e2eSeconds !== undefined && Number.isFinite(e2eSeconds)) {
      const p = priorityLabel(priority);
      this.child(`e\u0000${model}\u0000${p}`, () => this.endToEnd.labels({ model, priority: p })).observe(Math.max(0, e2eSeconds));
    }
  }

  observeQueueWait(model: string, priority: number, seconds: number): void {
    if (!Number.isFinite(seconds)) return;
    const p = priorityLabel(priority);
    this.child(`q\u0000${model}\u0000${p}`, () => this.queueWait.labels({ model, priority: p })).observe(Math.max(0, seconds));
  }

  /** The series for `key` (metric tag + label values), created by `make` the first time. */
  private child<T>(key: string, make: () => T): T {
    let c = this.children.get(key) as T | undefined;
    if (c === undefined) this.children.set(key, (c = make()));
    return c;
  }

  observeBatch(batch: BatchObservation): void {
    const { model, gear, items } = batch;
    const device = String(batch.device);
    const padded = Math.max(0, batch.padded ?? gear - items);
    this.batches.inc({ model, device, gear: String(gear), outcome: batch.outcome ?? 'ok' });
    this.batchSize.observe({ model }, items);
    if (padded > 0) this.paddedItems.inc({ model }, padded);
    // A slot is one position of the bucketed axis (one sample without buckets), as the device gets
    // them: a gear padding row pads `bound` slots, a real sample shorter than the bound the rest of its own.
    const bound = batch.boundLength ?? 1;
    const slots = (items + padded) * bound;
    const paddedSlots = padded * bound + Math.max(0, batch.paddedLengthSlots ?? 0);
    this.batchSlots.inc({ model }, slots);
    if (paddedSlots > 0) this.paddedSlots.inc({ model }, paddedSlots);
    this.paddingRatio.observe({ model }, slots > 0 ? paddedSlots / slots : 0);
    if (batch.executeSeconds !== undefined && Number.isFinite(batch.executeSeconds)) {
      this.deviceExecute.observe({ model, device, gear: String(gear) }, Math.max(0, batch.executeSeconds));
    }
  }

  setBatchesInFlight(device: number | string, n: number): void {
    this.inFlight.set({ device: String(device) }, n);
  }

  setDeviceMemoryUsed(device: number | string, bytes: number): void {
    if (Number.isFinite(bytes)) this.deviceMemoryUsed.set({ device: String(device) }, Math.max(0, bytes));
  }

  /**
   * Every model's local queue at once: a model missing from `queues` (unloaded in a hot reload) or
   * a priority level missing from its reading leaves the queue gauges.
   */
  setLocalQueues(queues: ReadonlyMap<string, LocalQueueReading>): void {
    const depth: Array<[{ model: string; priority: string }, number]> = [];
    const bytes: Array<[{ model: string }, number]> = [];
    const oldest = new Map<string, [{ model: string; priority: string }, number]>();
    for (const [model, q] of queues) {
      for (const [level, n] of q.depthByPriority) depth.push([{ model, priority: priorityLabel(level) }, n]);
      bytes.push([{ model }, q.bytes]);
      for (const [level, seconds] of q.oldestAgeSecondsByPriority ?? []) {
        // Levels that share a label ("other") show their oldest, not a sum of ages.
        const labels = { model, priority: priorityLabel(level) };
        const key = `${model}\u0000${labels.priority}`;
        const age = Math.max(0, seconds);
        if (Number.isFinite(age) && age >= (oldest.get(key)?.[1] ?? -1)) oldest.set(key, [labels, age]);
      }
    }
    this.queueDepth.replace(depth);
    this.queueBytes.replace(bytes);
    this.oldestQueuedAge.replace(oldest.values());
  }

  /**
   * Every model's backlog in device seconds at once: a model missing from `backlog` (unloaded, or
   * not measured yet) leaves the backlog gauges, and one whose source lag is unknown leaves the
   * source part and the total. source = lag x cost per request; total = source + local.
   */
  setBacklog(backlog: ReadonlyMap<string, BacklogReading>): void {
    const cost: Array<[{ model: string }, number]> = [];
    const local: Array<[{ model: string }, number]> = [];
    const source: Array<[{ model: string }, number]> = [];
    const total: Array<[{ model: string }, number]> = [];
    for (const [model, b] of backlog) {
      if (!nonNegative(b.deviceSecondsPerRequest) || !nonNegative(b.localSeconds)) continue;
      cost.push([{ model }, b.deviceSecondsPerRequest]);
      local.push([{ model }, b.localSeconds]);
      if (b.sourceLag === undefined || !nonNegative(b.sourceLag)) continue;
      const sourceSeconds = b.sourceLag * b.deviceSecondsPerRequest;
      source.push([{ model }, sourceSeconds]);
      // The queue priced at its lanes' costs may exceed its share of the lag at the default cost (or a lag read before it filled).
      total.push([{ model }, b.sourceLagHoldsLocal === true ? Math.max(sourceSeconds, b.localSeconds) : sourceSeconds + b.localSeconds]);
    }
    this.deviceSecondsPerRequest.replace(cost);
    this.localBacklog.replace(local);
    this.sourceBacklog.replace(source);
    this.backlog.replace(total);
  }

  /** Every model's source lag at once, from the worker's one transport: a model missing from `lag` leaves the gauge. */
  setSourceLag(transport: SourceTransport, lag: Readonly<Record<string, number>>): void {
    this.sourceLag.replace(Object.entries(lag).map(([model, n]) => [{ model, transport }, n] as const));
  }

  deadlineMiss(model: string, stage: DeadlineStage, n = 1): void {
    if (n > 0) this.deadlineMisses.inc({ model, stage }, n);
  }

  addWastedDeviceSeconds(model: string, reason: WasteReason, seconds: number): void {
    if (seconds > 0 && Number.isFinite(seconds)) this.wasted.inc({ model, reason }, seconds);
  }

  /** `n` 0 creates the series: a counter that first appears at 1 shows no increase() for that restart. */
  workerRestarted(device: number | string, n = 1): void {
    if (n >= 0) this.restarts.inc({ device: String(device) }, n);
  }

  setWorkerReady(ready: boolean): void {
    this.ready.set(ready ? 1 : 0);
  }

  /** runWorker's start-up, from before the device opens until it is over (done or failed). */
  setWorkerStarting(starting: boolean): void {
    this.starting.set(starting ? 1 : 0);
  }

  duplicateSeen(model: string, n = 1): void {
    if (n > 0) this.duplicates.inc({ model }, n);
  }

  modelLoadFailed(model: string): void {
    this.loadFailures.inc({ model });
  }

  /** The versions each model serves now, all at once: a version missing here leaves the gauge. */
  setVersionsServed(served: Iterable<{ readonly model: string; readonly version: string }>): void {
    this.versionServed.replace([...served].map(({ model, version }) => [{ model, version }, 1] as const));
  }

  repositoryScanSlow(): void {
    this.slowScans.inc();
  }

  deadLettered(model: string, reason: string): void {
    this.dlqs.inc({ model, reason });
  }

  /**
   * Runs before every scrape: pull-style gauges (queue depth, source lag, device memory) are refreshed here rather
   * than on every enqueue. A throwing hook does not fail the scrape; one slower than scrapeHookTimeoutMs does not
   * hold it (its gauges keep their last values, and what it sets shows from the next scrape on).
   */
  onScrape(hook: Hook): () => void {
    this.hooks.push(hook);
    return () => {
      const i = this.hooks.indexOf(hook);
      if (i >= 0) this.hooks.splice(i, 1);
    };
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /** Prometheus text exposition of this instance's registry. */
  async render(): Promise<string> {
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<void>((resolve) => (timer = setTimeout(resolve, this.hookTimeoutMs)));
    try {
      await Promise.race([Promise.all(this.hooks.map((hook) => this.runHook(hook))), waited]);
    } finally {
      clearTimeout(timer);
    }
    return this.registry.metrics();
  }

  private runHook(hook: Hook): Promise<void> {
    let run = this.running.get(hook);
    if (run === undefined) {
      run = (async () => hook())()
        .catch(() => undefined)
        .finally(() => this.running.delete(hook));
      this.running.set(hook, run);
    }
    return run;
  }

  resetAll(): void {
    this.registry.resetMetrics();
    for (const g of [this.queueDepth, this.queueBytes, this.sourceLag, this.oldestQueuedAge, this.deviceSecondsPerRequest, this.localBacklog, this.sourceBacklog, this.backlog, this.versionServed]) g.cleared();
    this.ready.set(0);
  }
}

/**
 * A source's priority is not always one a model has: a BullMQ job priority is any integer its
 * producer set, and each value would be a new series of every per-priority histogram.
 */
function priorityLabel(priority: number | undefined): string {
  if (priority === undefined) return 'none';
  return Number.isInteger(priority) && priority >= 0 && priority < MAX_PRIORITY_LEVELS ? String(priority) : 'other';
}

/** A finite non-negative reading. */
const nonNegative = (n: number): boolean => Number.isFinite(n) && n >= 0;
