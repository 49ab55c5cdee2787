import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { MAX_PRIORITY_LEVELS } from '../contracts/request-envelope.ts';
import { LocalHistogram } from './local-histogram.ts';

/**
 * All npu-fleet metrics. Each FleetMetrics owns its own Registry (never prom-client's global one) so
 * several instances in one process (tests, an embedded fleet) do not collide. Label sets are fixed
 * and bounded — model, version, priority, status, device, gear, stage, transport, reason — never
 * request ids. The runtime calls the typed helpers at its edges; core modules hold no metrics.
 */

export type RequestStatus = 'ok' | 'late' | 'expired' | 'rejected' | 'invalid' | 'failed';
/**
 * admission: already past when the message reached this worker (broker lag, a slow producer);
 * queue: passed in the local queue (expired, never sent to the device); device: passed while its
 * batch ran (late, or dropped as expired); publish: passed while its result was being published.
 */
export type DeadlineStage = 'admission' | 'queue' | 'device' | 'publish';
export type WasteReason = 'late' | 'expired';
export type SourceTransport = 'kafka' | 'bullmq' | 'memory';

/** Latency buckets in seconds: ms-scale inference up to a 30 s deadline. */
export const LATENCY_BUCKETS_SECONDS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
] as const;
/** Up to ModelConfigSchema's largest maxBatchSize (1024). */
export const BATCH_SIZE_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024] as const;
export const PADDING_RATIO_BUCKETS = [0, 0.05, 0.1, 0.25, 0.5, 0.75, 1] as const;

/**
 * Prefix for prom-client's default metrics. They are already named `process_*` and `nodejs_*`, so
 * `npu_fleet_` yields `npu_fleet_process_cpu_seconds_total`, `npu_fleet_nodejs_eventloop_lag_seconds`.
 */
export const PROCESS_METRICS_PREFIX = 'npu_fleet_';

type MetricKind = 'counter' | 'gauge' | 'histogram';
interface MetricDefinition {
  name: string;
  kind: MetricKind;
  help: string;
  labels: readonly string[];
}

/** The single list of fleet metric names; dashboards and alert rules are checked against it. */
export const FLEET_METRICS = {
  requests: {
    name: 'npu_fleet_requests_total',
    kind: 'counter',
    help: 'Requests answered, by outcome (ok|late|expired|rejected|invalid|failed)',
    labels: ['model', 'status'],
  },
  endToEndLatency: {
    name: 'npu_fleet_end_to_end_latency_seconds',
    kind: 'histogram',
    help: 'From the request createdAt to its result being published',
    labels: ['model', 'priority'],
  },
  queueWait: {
    name: 'npu_fleet_queue_wait_seconds',
    kind: 'histogram',
    help: 'Time a request waited in the local scheduler queue before its batch was dispatched',
    labels: ['model', 'priority'],
  },
  batchSize: {
    name: 'npu_fleet_batch_size',
    kind: 'histogram',
    help: 'Real (non-padding) items per dispatched batch',
    labels: ['model'],
  },
  batchPaddingRatio: {
    name: 'npu_fleet_batch_padding_ratio',
    kind: 'histogram',
    help: 'Padding items / gear size per dispatched batch',
    labels: ['model'],
  },
  paddedItems: {
    name: 'npu_fleet_padded_items_total',
    kind: 'counter',
    help: 'Padding items sent to the device to fill batches up to a gear',
    labels: ['model'],
  },
  batches: {
    name: 'npu_fleet_batches_total',
    kind: 'counter',
    help: 'Batches executed on a device, by gear',
    labels: ['model', 'device', 'gear'],
  },
  deviceExecute: {
    name: 'npu_fleet_device_execute_seconds',
    kind: 'histogram',
    help: 'Device execution time per batch (the execute itself, without the host/device copies)',
    labels: ['model', 'device', 'gear'],
  },
  batchesInFlight: {
    name: 'npu_fleet_batches_in_flight',
    kind: 'gauge',
    help: 'Batches currently submitted to the device and not yet completed',
    labels: ['device'],
  },
  deviceMemoryUsed: {
    name: 'npu_fleet_device_memory_used_bytes',
    kind: 'gauge',
    help: 'Device memory in use (total - free, as the device reports it), read on every scrape',
    labels: ['device'],
  },
  localQueueDepth: {
    name: 'npu_fleet_local_queue_depth',
    kind: 'gauge',
    help: 'Requests held by the local scheduler, per priority',
    labels: ['model', 'priority'],
  },
  localQueueBytes: {
    name: 'npu_fleet_local_queue_bytes',
    kind: 'gauge',
    help: 'Host memory held by the local scheduler in queued request messages (queue.softLimitBytes pauses intake)',
    labels: ['model'],
  },
  sourceLag: {
    name: 'npu_fleet_source_lag',
    kind: 'gauge',
    help: 'Work waiting in the broker: Kafka consumer-group lag or BullMQ waiting jobs',
    labels: ['model', 'transport'],
  },
  deadlineMisses: {
    name: 'npu_fleet_deadline_misses_total',
    kind: 'counter',
    help: 'Requests whose deadline passed, by the stage they were in (admission|queue|device|publish)',
    labels: ['model', 'stage'],
  },
  wastedDeviceSeconds: {
    name: 'npu_fleet_wasted_device_seconds_total',
    kind: 'counter',
    help: 'Device seconds spent on work whose result was late or dropped as expired (pro rata per item)',
    labels: ['model', 'reason'],
  },
  workerRestarts: {
    name: 'npu_fleet_worker_restarts_total',
    kind: 'counter',
    help: 'Worker processes restarted by the supervisor',
    labels: ['device'],
  },
  workerReady: {
    name: 'npu_fleet_worker_ready',
    kind: 'gauge',
    help: '1 when the worker accepts work (readyz 200), else 0',
    labels: [],
  },
  duplicates: {
    name: 'npu_fleet_duplicates_total',
    kind: 'counter',
    help: 'Redelivered requests seen again (at-least-once duplicates)',
    labels: ['model'],
  },
  modelLoadFailures: {
    name: 'npu_fleet_model_load_failures_total',
    kind: 'counter',
    help: 'Model versions that failed to load during a hot reload (the model keeps its served versions)',
    labels: ['model'],
  },
  dlq: {
    name: 'npu_fleet_dlq_total',
    kind: 'counter',
    help: 'Messages written to the dead-letter topic/queue, by reason code',
    labels: ['model', 'reason'],
  },
} as const satisfies Record<string, MetricDefinition>;

/** Every series name a scrape can contain for the fleet metrics (histograms expand to _bucket/_sum/_count). */
export function fleetSeriesNames(): string[] {
  const out: string[] = [];
  for (const def of Object.values(FLEET_METRICS)) {
    if (def.kind === 'histogram') out.push(`${def.name}_bucket`, `${def.name}_sum`, `${def.name}_count`);
    else out.push(def.name);
  }
  return out;
}

export interface FleetMetricsOptions {
  /**
   * prom-client default metrics (CPU, memory, GC, event-loop lag — how a native call blocking the
   * loop shows up) with PROCESS_METRICS_PREFIX. Default true.
   */
  processMetrics?: boolean;
  /** Constant labels on every series, e.g. `{ worker: 'device-0' }`. Keep them bounded. */
  defaultLabels?: Record<string, string>;
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
  executeSeconds: number;
}

type Hook = () => void | Promise<void>;

export class FleetMetrics {
  readonly registry: Registry;
  private readonly requests: Counter<'model' | 'status'>;
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
  private readonly batches: Counter<'model' | 'device' | 'gear'>;
  private readonly deviceExecute: Histogram<'model' | 'device' | 'gear'>;
  private readonly inFlight: Gauge<'device'>;
  private readonly deviceMemoryUsed: Gauge<'device'>;
  private readonly queueDepth: Gauge<'model' | 'priority'>;
  private readonly queueBytes: Gauge<'model'>;
  private readonly sourceLag: Gauge<'model' | 'transport'>;
  private readonly deadlineMisses: Counter<'model' | 'stage'>;
  private readonly wasted: Counter<'model' | 'reason'>;
  private readonly restarts: Counter<'device'>;
  private readonly ready: Gauge;
  private readonly duplicates: Counter<'model'>;
  private readonly dlqs: Counter<'model' | 'reason'>;
  private readonly loadFailures: Counter<'model'>;
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

    this.requests = counter(m.requests);
    // Observed once or twice per request: the cheap local kind (see LocalHistogram).
    const perRequest = <L extends string>(d: MetricDefinition & { labels: readonly L[] }) =>
      new LocalHistogram<L>(d.name, d.help, d.labels, latency, this.registry);
    this.endToEnd = perRequest(m.endToEndLatency);
    this.queueWait = perRequest(m.queueWait);
    this.batchSize = histogram(m.batchSize, BATCH_SIZE_BUCKETS);
    this.paddingRatio = histogram(m.batchPaddingRatio, PADDING_RATIO_BUCKETS);
    this.paddedItems = counter(m.paddedItems);
    this.batches = counter(m.batches);
    this.deviceExecute = histogram(m.deviceExecute, latency);
    this.inFlight = gauge(m.batchesInFlight);
    this.deviceMemoryUsed = gauge(m.deviceMemoryUsed);
    this.queueDepth = gauge(m.localQueueDepth);
    this.queueBytes = gauge(m.localQueueBytes);
    this.sourceLag = gauge(m.sourceLag);
    this.deadlineMisses = counter(m.deadlineMisses);
    this.wasted = counter(m.wastedDeviceSeconds);
    this.restarts = counter(m.workerRestarts);
    this.ready = new Gauge({ name: m.workerReady.name, help: m.workerReady.help, registers });
    this.duplicates = counter(m.duplicates);
    this.dlqs = counter(m.dlq);
    this.loadFailures = counter(m.modelLoadFailures);
    this.ready.set(0);
  }

  /**
   * One request's outcome. `e2eSeconds` (createdAt → result published) is observed when given and
   * finite; rejected/invalid requests often have no trustworthy createdAt, so it is optional.
   */
  observeResult(model: string, status: RequestStatus, e2eSeconds?: number, priority?: number): void {
    this.child(`r\u0000${model}\u0000${status}`, () => this.requests.labels({ model, status })).inc();
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
    this.batches.inc({ model, device, gear: String(gear) });
    this.batchSize.observe({ model }, items);
    if (padded > 0) this.paddedItems.inc({ model }, padded);
    const slots = items + padded;
    this.paddingRatio.observe({ model }, slots > 0 ? padded / slots : 0);
    if (Number.isFinite(batch.executeSeconds)) {
      this.deviceExecute.observe({ model, device, gear: String(gear) }, Math.max(0, batch.executeSeconds));
    }
  }

  setBatchesInFlight(device: number | string, n: number): void {
    this.inFlight.set({ device: String(device) }, n);
  }

  setDeviceMemoryUsed(device: number | string, bytes: number): void {
    if (Number.isFinite(bytes)) this.deviceMemoryUsed.set({ device: String(device) }, Math.max(0, bytes));
  }

  setQueueDepth(model: string, priority: number, n: number): void {
    this.queueDepth.set({ model, priority: priorityLabel(priority) }, n);
  }

  /** Summed over the model's lanes (versions) by the caller. */
  setQueueBytes(model: string, bytes: number): void {
    this.queueBytes.set({ model }, bytes);
  }

  setSourceLag(model: string, transport: SourceTransport, n: number): void {
    this.sourceLag.set({ model, transport }, n);
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

  duplicateSeen(model: string, n = 1): void {
    if (n > 0) this.duplicates.inc({ model }, n);
  }

  modelLoadFailed(model: string): void {
    this.loadFailures.inc({ model });
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
