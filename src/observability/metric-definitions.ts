/**
 * The fleet's metric names, kinds, help texts and label sets, and the types of their bounded label
 * values: the one table FleetMetrics registers from and dashboards/alert rules are checked against.
 */
import { ERROR_CODES, type ErrorCode } from '../errors/fleet-error.ts';

export type RequestStatus = 'ok' | 'late' | 'expired' | 'rejected' | 'invalid' | 'failed';
/** A request answered without being served: every status but ok and late (served, past its deadline). */
export type UnservedStatus = Exclude<RequestStatus, 'ok' | 'late'>;
export const isUnserved = (status: RequestStatus): status is UnservedStatus => status !== 'ok' && status !== 'late';
/** The `code` label of npu_fleet_unserved_total: a FleetError code, or OTHER. */
export type UnservedCode = ErrorCode | 'OTHER';
/**
 * A result's error code as a label value. A result envelope's code is any string (the schema says
 * z.string(), and a transport or an older worker could put anything there): each one would be a
 * new series, so only the closed list of FleetError codes passes, and a result without one is OTHER too.
 */
export function unservedCodeLabel(code: string | undefined): UnservedCode {
  // hasOwn, not `in`: "toString" or "__proto__" must not pass as codes.
  return code !== undefined && Object.hasOwn(ERROR_CODES, code) ? (code as ErrorCode) : 'OTHER';
}
/**
 * admission: already past when the message reached this worker (broker lag, a slow producer);
 * queue: passed in the local queue (expired, never sent to the device); device: passed while its
 * batch ran (late, or dropped as expired); publish: passed while its result was being published.
 */
export type DeadlineStage = 'admission' | 'queue' | 'device' | 'publish';
export type WasteReason = 'late' | 'expired' | 'superseded';
export type SourceTransport = 'kafka' | 'bullmq' | 'memory';
/**
 * How a batch the device was given ended: ok (its results were split per request), or failed (the
 * execute rejected, or its outputs could not be used). A batch that failed on the host before the
 * device got it is in neither: only its requests' failed results count it.
 */
export type BatchOutcome = 'ok' | 'failed';

/** Latency buckets in seconds: ms-scale inference up to a 30 s deadline. */
export const LATENCY_BUCKETS_SECONDS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
] as const;
/**
 * Device execute buckets in seconds: 10 µs up to 30 s, as the latency buckets end. A small model's batch runs
 * well under a millisecond (the simulator: mlp-classifier 3.5 µs at gear 1, 22 µs at gear 32;
 * small-cnn 0.21 ms at gear 1), and with 1 ms as the lowest bound every such gear read as 0.5 ms.
 */
export const DEVICE_EXECUTE_BUCKETS_SECONDS = [
  0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
] as const;
/** Up to ModelConfigSchema's largest maxBatchSize (1024). */
export const BATCH_SIZE_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024] as const;
export const PADDING_RATIO_BUCKETS = [0, 0.05, 0.1, 0.25, 0.5, 0.75, 1] as const;

/**
 * Prefix for prom-client's default metrics. They are already named `process_*` and `nodejs_*`, so
 * `npu_fleet_` yields `npu_fleet_process_cpu_seconds_total`, `npu_fleet_nodejs_eventloop_lag_seconds`.
 */
export const PROCESS_METRICS_PREFIX = 'npu_fleet_';

export type MetricKind = 'counter' | 'gauge' | 'histogram';
export interface MetricDefinition {
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
  unserved: {
    name: 'npu_fleet_unserved_total',
    kind: 'counter',
    help: 'Requests answered without being served (status expired|rejected|invalid|failed), by the FleetError code of their result: why (QUEUE_FULL, UNKNOWN_MODEL, SUPERSEDED, DEADLINE_EXCEEDED, DEVICE_ERROR...; OTHER for a code outside that list or none). Counted with npu_fleet_requests_total: its sum over code is that counter for these statuses',
    labels: ['model', 'status', 'code'],
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
    help: 'Real (non-padding) items per batch given to the device (failed ones too)',
    labels: ['model'],
  },
  batchPaddingRatio: {
    name: 'npu_fleet_batch_padding_ratio',
    kind: 'histogram',
    help: 'Padded share of a dispatched batch\'s slots: its gear padding rows and, for a bucketed model, the positions of the bucketed input\'s variable axis padded up to the bucket bound (slots = gear x bound; gear without buckets)',
    labels: ['model'],
  },
  paddedItems: {
    name: 'npu_fleet_padded_items_total',
    kind: 'counter',
    help: 'Padding items (rows) sent to the device to fill batches up to a gear; padding along a bucketed axis is in npu_fleet_padded_slots_total',
    labels: ['model'],
  },
  batchSlots: {
    name: 'npu_fleet_batch_slots_total',
    kind: 'counter',
    help: 'Slots sent to the device: gear x bucket bound per batch (gear for a model without buckets); npu_fleet_padded_slots_total over it is the padded share of all slots',
    labels: ['model'],
  },
  paddedSlots: {
    name: 'npu_fleet_padded_slots_total',
    kind: 'counter',
    help: 'Slots sent to the device that were padding: gear padding rows (bound slots each) and variable-axis positions padded up to the bucket bound',
    labels: ['model'],
  },
  batches: {
    name: 'npu_fleet_batches_total',
    kind: 'counter',
    help: 'Batches given to a device, by gear and outcome (ok|failed: the execute rejected or its outputs were unusable); the sum over outcome is every batch the device ran or tried to',
    labels: ['model', 'device', 'gear', 'outcome'],
  },
  deviceExecute: {
    name: 'npu_fleet_device_execute_seconds',
    kind: 'histogram',
    help: 'Device execution time per batch (the execute itself, without the host/device copies; npu_fleet_wasted_device_seconds_total counts the same time). A failed batch is in it when the device reported its time (it ran, and its outputs were unusable); a rejected execute reports none, so the count can be below npu_fleet_batches_total',
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
  oldestQueuedAge: {
    name: 'npu_fleet_oldest_queued_age_seconds',
    kind: 'gauge',
    help: 'Age of the oldest request in the local scheduler per priority, counted from when it reached this worker (its receive time on the worker\'s own clock: no producer clock skew; time spent in the broker before is npu_fleet_source_lag\'s). Absent while the priority level holds nothing, so max() across workers is the oldest anywhere',
    labels: ['model', 'priority'],
  },
  deviceSecondsPerRequest: {
    name: 'npu_fleet_device_seconds_per_request',
    kind: 'gauge',
    help: 'Learnt device seconds one request costs when batches are full: the scheduler\'s device-time estimate of a full batch (the adaptive limit\'s gear, i.e. the largest gear unless targetLatencyMs lowered the limit; host/device copies included, as batches are measured) / that gear x mean items per dispatched request. From the model\'s default lane (newest version; a model whose requests all pin a version: its costliest lane). Absent until this worker has measured a batch of the model: no guess, no 0',
    labels: ['model'],
  },
  localBacklogSeconds: {
    name: 'npu_fleet_local_backlog_seconds',
    kind: 'gauge',
    help: 'Device seconds this worker needs for the requests in its local queue at full batches: queued items x learnt device seconds per item of a full batch (each lane at its own estimate). Per worker: sum across workers. Absent with npu_fleet_device_seconds_per_request',
    labels: ['model'],
  },
  sourceBacklogSeconds: {
    name: 'npu_fleet_source_backlog_seconds',
    kind: 'gauge',
    help: 'Device seconds the broker-side backlog needs at full batches: npu_fleet_source_lag x npu_fleet_device_seconds_per_request. The lag is the whole group\'s, so every worker reports this (each at its own measured cost): max by (model) across workers, never sum. Absent until both are known',
    labels: ['model'],
  },
  backlogSeconds: {
    name: 'npu_fleet_backlog_seconds',
    kind: 'gauge',
    help: 'Device seconds to clear the model\'s backlog as this worker sees it: (broker-side lag + this worker\'s local queue) x learnt device seconds per request at full batches = npu_fleet_source_backlog_seconds + npu_fleet_local_backlog_seconds (on Kafka the lag holds this worker\'s queue already: the larger of the two). Not additive across workers (each counts the same lag): the fleet\'s is max by (model) of the source part + sum by (model) of the local part (not on Kafka)',
    labels: ['model'],
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
    help: 'Device execute seconds (as npu_fleet_device_execute_seconds: without the host/device copies) spent on work whose result was late (reason late), dropped as expired (expired), or served and then withheld because a newer frame of its stream was answered first (superseded; BullMQ); a request counts its items / gear share of its batch',
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
  workerStarting: {
    name: 'npu_fleet_worker_starting',
    kind: 'gauge',
    help: '1 while the worker starts (device open, model loads, broker join; bounded by worker.startTimeoutMs), 0 once its start-up is over: unready while 1 is expected',
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
  modelVersionServed: {
    name: 'npu_fleet_model_version_served',
    kind: 'gauge',
    help: '1 for each model version this worker serves now (its default and the versions requests may pin); a version loaded on some workers only (it failed to load on the others) shows as workers that differ here',
    labels: ['model', 'version'],
  },
  repositorySlowScans: {
    name: 'npu_fleet_model_repository_slow_scans_total',
    kind: 'counter',
    help: 'Hot-reload scans of the model repository still running past their time limit (a hung or slow mount); the worker serves on',
    labels: [],
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
