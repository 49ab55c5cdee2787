import { effectiveQueueDelaysMs, ModelConfigSchema, type ModelConfig } from '../contracts/model-config.ts';
import type { LiveSchedulerOptionsInput } from '../scheduler/live-options.ts';

/**
 * What a running worker does with each field of a changed config.yaml: 'live' fields apply to the
 * model's running lanes at the poll that sees the change, 'restart' ones only to workers started
 * afterwards. Every field needs a verdict (a new one fails to compile until it has one).
 */
export const CONFIG_FIELD_RELOAD = {
  // The model's identity: the scan refuses a name that differs from its directory.
  name: 'restart',
  // Text for humans; nothing reads it.
  description: 'live',
  // Says which artifact a worker loads; the versions loaded stay as they are.
  platform: 'restart',
  // Tensor layout: each loaded version was checked against them and batches are gathered and
  // scattered by them; a request valid under new ones would be fed to a model bound to the old.
  inputs: 'restart',
  outputs: 'restart',
  // The gear table, the learnt estimate per gear and the device's compiled gears and buffers.
  maxBatchSize: 'restart',
  batchGears: 'restart',
  // A lane, a subscribed topic or queue, and a paused set per level, all made at start.
  priorityLevels: 'restart',
  // A lane per bucket, and the device buffers sized for the largest bound.
  buckets: 'restart',
  // Read per request at intake (request-validation), from the lane's config.
  defaultPriority: 'live',
  // The scheduler reads the delays at every decision, the limits at every enqueue, the target at
  // every adaptive window, the stream rule at every enqueue (BatchScheduler.reconfigure).
  maxQueueDelayMs: 'live',
  queue: 'live',
  targetLatencyMs: 'live',
  streams: 'live',
  // Read when a batch is dispatched (its overrun timer) and when its results are built: batches
  // dispatched from then on follow the new values, a batch on the device keeps those it left with.
  execTimeoutMs: 'live',
  lateResults: 'live',
  // The scan picks the served versions by it, and a reload loads and retires versions already.
  versionPolicy: 'live',
} as const satisfies Record<keyof ModelConfig, 'live' | 'restart'>;

type Field = keyof ModelConfig;
const FIELDS = Object.keys(CONFIG_FIELD_RELOAD) as Field[];

export interface ConfigReload {
  /** The config the worker runs with from now: the running one with the applied fields of the new one. */
  readonly config: ModelConfig;
  /** Changed live fields, now applied. */
  readonly applied: readonly Field[];
  /**
   * Changed fields that wait for a restart: the restart-only ones, and live ones whose new value
   * is valid only with them (a maxQueueDelayMs or defaultPriority for a new priorityLevels).
   */
  readonly held: readonly Field[];
}

const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

/** What a running worker takes on from `next`, a valid config.yaml of a model it runs with `running`. */
export function reloadModelConfig(running: ModelConfig, next: ModelConfig): ConfigReload {
  const changed = FIELDS.filter((k) => !same(running[k], next[k]));
  let applied = changed.filter((k) => CONFIG_FIELD_RELOAD[k] === 'live');
  for (;;) {
    if (applied.length === 0) return { config: running, applied, held: changed };
    const candidate: Record<string, unknown> = { ...running };
    for (const k of applied) candidate[k] = next[k];
    // The file was valid as a whole; its live half laid over the running config may not be.
    const parsed = ModelConfigSchema.safeParse(candidate);
    if (parsed.success) {
      const kept = applied;
      return { config: parsed.data, applied: kept, held: changed.filter((k) => !kept.includes(k)) };
    }
    const blamed = new Set(parsed.error.issues.map((i) => i.path[0]));
    const rest = applied.filter((k) => !blamed.has(k));
    // An issue that names none of them cannot be laid on one: hold them all.
    applied = rest.length === applied.length ? [] : rest;
  }
}

/** `fields` for a log line, an object field narrowed to the keys that changed (queue.hardLimitItems). */
export function fieldPaths(fields: readonly Field[], before: ModelConfig, after: ModelConfig): string[] {
  return fields.flatMap((k) => {
    const a: unknown = before[k];
    const b: unknown = after[k];
    if (!isRecord(a) || !isRecord(b)) return [k];
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((sub) => !same(a[sub], b[sub]));
    return keys.length === 0 ? [k] : keys.map((sub) => `${k}.${sub}`);
  });
}

/** The scheduler options a running lane takes on from its config (BatchScheduler.reconfigure). */
export function liveSchedulerOptionsFor(config: ModelConfig): LiveSchedulerOptionsInput {
  return {
    maxQueueDelayMs: effectiveQueueDelaysMs(config),
    softLimitItems: config.queue.softLimitItems,
    hardLimitItems: config.queue.hardLimitItems,
    softLimitBytes: config.queue.softLimitBytes,
    hardLimitBytes: config.queue.hardLimitBytes,
    targetLatencyMs: config.targetLatencyMs,
    streamSuperseded: config.streams.superseded,
  };
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
