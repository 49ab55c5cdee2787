import { z } from 'zod';
import { FleetError } from '../errors/fleet-error.ts';

/**
 * Options of one model's scheduler. The runtime maps the model config (contracts) onto these; the
 * scheduler does not read the model config itself so that it stays testable on its own.
 * Durations end in Ms; queue limits count ITEMS (samples, shape[0]), not requests, because device
 * work and host memory scale with items.
 */
export const SCHEDULER_DEFAULTS = {
  maxBatchSize: 32,
  gears: [] as number[],
  priorityLevels: 3,
  defaultMaxQueueDelayMs: [0, 5, 20] as number[],
  softLimitItems: 4096,
  hardLimitItems: 8192,
  softLimitBytes: null as number | null,
  hardLimitBytes: null as number | null,
  agingMs: 1000 as number | null,
  buckets: [] as number[],
  targetLatencyMs: null as number | null,
  adaptiveWindowBatches: 20,
  adaptiveHysteresis: 0.1,
  adaptiveGrowIntervalMs: 2000,
  ewmaAlpha: 0.2,
  priorDeviceBaseMs: 5,
  priorDevicePerItemMs: 0.5,
  deadlineMarginMs: 1,
  trimPadding: true,
  estimateTrustMs: 5000,
  probeIntervalMs: 1000,
  streamSuperseded: 'serve' as 'serve' | 'drop',
} as const;

const positiveInt = z.number().int().min(1);
const durationMs = z.number().min(0);
const ascendingInts = (what: string) =>
  z
    .array(positiveInt)
    .refine((xs) => xs.every((x, i) => i === 0 || x > (xs[i - 1] as number)), {
      message: `${what} must be strictly ascending positive integers, e.g. [1, 2, 4, 8]`,
    });

export const schedulerOptionsSchema = z
  .object({
    /** Most items in one batch. @defaultValue 32 */
    maxBatchSize: positiveInt.max(65_536).default(SCHEDULER_DEFAULTS.maxBatchSize),
    /** Batch sizes the compiled model accepts; a batch is padded up to the next one. Empty: every size 1..maxBatchSize. @defaultValue [] */
    gears: ascendingInts('gears').default(() => [...SCHEDULER_DEFAULTS.gears]),
    /** Number of priority levels; 0 is the most urgent. @defaultValue 3 */
    priorityLevels: positiveInt.max(16).default(SCHEDULER_DEFAULTS.priorityLevels),
    /**
     * Longest a request of each level waits for a fuller batch. 0 dispatches at once (preemptive);
     * null never dispatches on age (only when full or when a deadline presses).
     * @defaultValue [0, 5, 20, 20, ...] (last value repeated for deeper levels)
     */
    maxQueueDelayMs: z.array(durationMs.nullable()).optional(),
    /** Queued items at which enqueue answers `backpressure` (the runtime pauses intake). @defaultValue 4096 */
    softLimitItems: positiveInt.default(SCHEDULER_DEFAULTS.softLimitItems),
    /** Queued items beyond which enqueue rejects. @defaultValue 8192 */
    hardLimitItems: positiveInt.default(SCHEDULER_DEFAULTS.hardLimitItems),
    /** Intake may resume once queued items fall to this (low watermark). @defaultValue softLimitItems / 2 */
    resumeBelowItems: z.number().int().min(0).optional(),
    /**
     * Queued request bytes (host memory held) at which enqueue answers `backpressure`, like
     * softLimitItems; intake may resume once both are back under their low watermarks (half of
     * this). null: no byte bound. @defaultValue null
     */
    softLimitBytes: positiveInt.nullable().default(SCHEDULER_DEFAULTS.softLimitBytes),
    /** Queued request bytes beyond which enqueue rejects (an empty queue still takes one request). @defaultValue null */
    hardLimitBytes: positiveInt.nullable().default(SCHEDULER_DEFAULTS.hardLimitBytes),
    /**
     * Aging: a request of level p that has waited (p + 1) × agingMs is overdue; overdue requests
     * go before all others, oldest-overdue first. null turns aging off (strict priority).
     * @defaultValue 1000
     */
    agingMs: z.number().positive().nullable().default(SCHEDULER_DEFAULTS.agingMs),
    /** Upper bounds of the variable-length buckets; a batch holds one bucket padded to its bound. Empty: no bucketing. @defaultValue [] */
    buckets: ascendingInts('buckets').default(() => [...SCHEDULER_DEFAULTS.buckets]),
    /** p90 device time per batch to aim for; null turns the adaptive batch-size limit off. @defaultValue null */
    targetLatencyMs: z.number().positive().nullable().default(SCHEDULER_DEFAULTS.targetLatencyMs),
    /** Completed batches per p90 evaluation of the adaptive limit. @defaultValue 20 */
    adaptiveWindowBatches: z.number().int().min(3).default(SCHEDULER_DEFAULTS.adaptiveWindowBatches),
    /** Dead band around the target: shrink above target × (1 + h), grow only below target × (1 − h). @defaultValue 0.1 */
    adaptiveHysteresis: z.number().min(0).max(0.9).default(SCHEDULER_DEFAULTS.adaptiveHysteresis),
    /** The limit grows back by at most one gear per this interval. @defaultValue 2000 */
    adaptiveGrowIntervalMs: durationMs.default(SCHEDULER_DEFAULTS.adaptiveGrowIntervalMs),
    /** Weight of the newest sample in the per-gear device-time EWMA. @defaultValue 0.2 */
    ewmaAlpha: z.number().gt(0).max(1).default(SCHEDULER_DEFAULTS.ewmaAlpha),
    /** Prior device time before any batch completed: base + perItem × gear. @defaultValue 5 */
    priorDeviceBaseMs: durationMs.default(SCHEDULER_DEFAULTS.priorDeviceBaseMs),
    /** @defaultValue 0.5 */
    priorDevicePerItemMs: durationMs.default(SCHEDULER_DEFAULTS.priorDevicePerItemMs),
    /** Slack kept when releasing a batch early for a deadline. @defaultValue 1 */
    deadlineMarginMs: durationMs.default(SCHEDULER_DEFAULTS.deadlineMarginMs),
    /** Return a batch's tail to the queue when that drops it to a smaller gear with less padding. @defaultValue true */
    trimPadding: z.boolean().default(SCHEDULER_DEFAULTS.trimPadding),
    /**
     * A gear's estimate not refreshed by a batch of that gear for this long is stale: a request it
     * alone rules out (its deadline still ahead) may go to an idle device anyway, at most once per
     * probeIntervalMs, so an estimate inflated by one slow spell (a warm-up run, a stall) is
     * measured again instead of expiring that traffic for good. @defaultValue 5000
     */
    estimateTrustMs: durationMs.default(SCHEDULER_DEFAULTS.estimateTrustMs),
    /** @defaultValue 1000 */
    probeIntervalMs: durationMs.default(SCHEDULER_DEFAULTS.probeIntervalMs),
    /**
     * Requests with a streamKey (video frames): 'serve' queues every one; 'drop' keeps only the
     * newest queued per key (by createdAt, ties to the later arrival): a newer one displaces the
     * queued one, an older one is refused on arrival, both with reason 'superseded'. Requests
     * already dispatched are never touched. @defaultValue 'serve'
     */
    streamSuperseded: z.enum(['serve', 'drop']).default(SCHEDULER_DEFAULTS.streamSuperseded),
  })
  .strict()
  .superRefine((o, ctx) => {
    if (o.maxQueueDelayMs !== undefined && o.maxQueueDelayMs.length !== o.priorityLevels) {
      ctx.addIssue({
        code: 'custom',
        path: ['maxQueueDelayMs'],
        message: `maxQueueDelayMs needs one entry per priority level (${o.priorityLevels}), got ${o.maxQueueDelayMs.length}`,
      });
    }
    if (o.hardLimitItems < o.softLimitItems) {
      ctx.addIssue({ code: 'custom', path: ['hardLimitItems'], message: 'hardLimitItems must be >= softLimitItems' });
    }
    if (o.softLimitBytes !== null && o.hardLimitBytes !== null && o.hardLimitBytes < o.softLimitBytes) {
      ctx.addIssue({ code: 'custom', path: ['hardLimitBytes'], message: 'hardLimitBytes must be >= softLimitBytes' });
    }
    if (o.resumeBelowItems !== undefined && o.resumeBelowItems >= o.softLimitItems) {
      ctx.addIssue({ code: 'custom', path: ['resumeBelowItems'], message: 'resumeBelowItems must be below softLimitItems' });
    }
    if (o.gears.length > 0 && (o.gears[0] as number) > o.maxBatchSize) {
      ctx.addIssue({ code: 'custom', path: ['gears'], message: 'the smallest gear exceeds maxBatchSize; lower it or raise maxBatchSize' });
    }
  });

export type SchedulerOptionsInput = z.input<typeof schedulerOptionsSchema>;

/** Fully resolved options: every default filled, per-level arrays complete, gears capped at maxBatchSize. */
export interface SchedulerOptions {
  readonly maxBatchSize: number;
  /** Ascending; never empty (1..maxBatchSize when no gears were configured); last = largest batch. */
  readonly gears: readonly number[];
  readonly gearsConfigured: boolean;
  readonly priorityLevels: number;
  /** One per level; Infinity = never dispatch on age. */
  readonly maxQueueDelayMs: readonly number[];
  readonly softLimitItems: number;
  readonly hardLimitItems: number;
  readonly resumeBelowItems: number;
  /** Infinity when unbounded. */
  readonly softLimitBytes: number;
  readonly hardLimitBytes: number;
  readonly resumeBelowBytes: number;
  readonly agingMs: number | null;
  readonly buckets: readonly number[];
  readonly targetLatencyMs: number | null;
  readonly adaptiveWindowBatches: number;
  readonly adaptiveHysteresis: number;
  readonly adaptiveGrowIntervalMs: number;
  readonly ewmaAlpha: number;
  readonly priorDeviceBaseMs: number;
  readonly priorDevicePerItemMs: number;
  readonly deadlineMarginMs: number;
  readonly trimPadding: boolean;
  readonly estimateTrustMs: number;
  readonly probeIntervalMs: number;
  readonly streamSuperseded: 'serve' | 'drop';
}

/** Validates and resolves options; throws FleetError INVALID_CONFIG naming the path and the fix. */
export function resolveSchedulerOptions(input: SchedulerOptionsInput = {}): SchedulerOptions {
  const parsed = schedulerOptionsSchema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const path = issue?.path.join('.') ?? '';
    throw new FleetError('INVALID_CONFIG', `scheduler options${path ? `.${path}` : ''}: ${issue?.message ?? 'invalid'}`, {
      details: { path, issues: parsed.error.issues.length },
    });
  }
  const o = parsed.data;
  const delays = o.maxQueueDelayMs ?? defaultDelays(o.priorityLevels);
  const usable = o.gears.filter((g) => g <= o.maxBatchSize);
  const gears = usable.length > 0 ? usable : Array.from({ length: o.maxBatchSize }, (_, i) => i + 1);
  return {
    maxBatchSize: gears[gears.length - 1] as number,
    gears,
    gearsConfigured: usable.length > 0,
    priorityLevels: o.priorityLevels,
    maxQueueDelayMs: delays.map((d) => d ?? Infinity),
    softLimitItems: o.softLimitItems,
    hardLimitItems: o.hardLimitItems,
    resumeBelowItems: o.resumeBelowItems ?? Math.floor(o.softLimitItems / 2),
    softLimitBytes: o.softLimitBytes ?? Infinity,
    hardLimitBytes: o.hardLimitBytes ?? Infinity,
    resumeBelowBytes: o.softLimitBytes === null ? Infinity : Math.floor(o.softLimitBytes / 2),
    agingMs: o.agingMs,
    buckets: o.buckets,
    targetLatencyMs: o.targetLatencyMs,
    adaptiveWindowBatches: o.adaptiveWindowBatches,
    adaptiveHysteresis: o.adaptiveHysteresis,
    adaptiveGrowIntervalMs: o.adaptiveGrowIntervalMs,
    ewmaAlpha: o.ewmaAlpha,
    priorDeviceBaseMs: o.priorDeviceBaseMs,
    priorDevicePerItemMs: o.priorDevicePerItemMs,
    deadlineMarginMs: o.deadlineMarginMs,
    trimPadding: o.trimPadding,
    estimateTrustMs: o.estimateTrustMs,
    probeIntervalMs: o.probeIntervalMs,
    streamSuperseded: o.streamSuperseded,
  };
}

function defaultDelays(levels: number): number[] {
  const base = SCHEDULER_DEFAULTS.defaultMaxQueueDelayMs;
  return Array.from({ length: levels }, (_, i) => base[Math.min(i, base.length - 1)] as number);
}
