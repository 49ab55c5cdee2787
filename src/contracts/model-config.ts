import { z } from 'zod';
import { DtypeSchema, TensorNameSchema } from './tensor.ts';
import { MAX_PRIORITY_LEVELS, ModelNameSchema } from './request-envelope.ts';

/** Defaults beside the schema (style rule 3). */
export const MODEL_DEFAULTS = {
  platform: 'onnx',
  maxBatchSize: 32,
  priorityLevels: 3,
  defaultPriority: 1,
  softLimitItems: 4096,
  hardLimitItems: 16384,
  // Host memory a worker holds per model in queued requests: a 3x224x224 float32 model reaches
  // 256 MiB at ~430 requests, long before 4096 items.
  softLimitBytes: 256 * 1024 * 1024,
  hardLimitBytes: 1024 * 1024 * 1024,
  lateResults: 'deliver',
  targetLatencyMs: 50,
  execTimeoutMs: 1000,
  streamsSuperseded: 'serve',
} as const;

const strictlyIncreasing = (list: readonly number[]): boolean => list.every((v, i) => i === 0 || v > (list[i - 1] ?? 0));

/** The list as given and the one meant (sorted, repeats dropped): an unsorted list is the usual slip. */
function increasingError(issue: { input?: unknown }): string {
  const list = Array.isArray(issue.input) ? (issue.input as number[]) : [];
  const meant = [...new Set(list)].sort((a, b) => a - b);
  return `must be strictly increasing (each once, smallest first), got [${list.join(', ')}] (write [${meant.join(', ')}])`;
}

export const ModelTensorSchema = z.strictObject({
  name: TensorNameSchema,
  dtype: DtypeSchema,
  dims: z
    .array(z.number().int().min(-1, 'use -1 for a dynamic dimension'))
    .min(1)
    .describe('Dimensions including the batch dimension; -1 marks a dynamic one. An input takes the batch on axis 0; an output on its first -1 (e.g. [3, -1] for a transposed one), which holds size / gear values per item'),
});
export type ModelTensor = z.infer<typeof ModelTensorSchema>;

export const BucketsSchema = z
  .strictObject({
    input: TensorNameSchema.describe('Input whose variable-length axis is bucketed'),
    axis: z.number().int().min(1).describe('The variable-length axis (never the batch axis 0)'),
    bounds: z
      .array(z.number().int().positive())
      .min(1)
      .refine(strictlyIncreasing, { error: increasingError, params: { saysFix: true } })
      .describe('Bucket upper bounds; a batch holds one bucket, padded to its bound'),
    padValue: z.number().default(0).describe('Value written into padding positions'),
  })
  .describe('Bucketing of a variable-length input');

export const StreamsSchema = z
  .strictObject({
    superseded: z
      .enum(['serve', 'drop'])
      .default(MODEL_DEFAULTS.streamsSuperseded)
      .describe(
        'serve: every frame of a stream is served; drop (latest frame wins): a queued request whose streamKey has a newer ' +
          'request queued on the same worker (by createdAt) leaves the queue unserved, answered rejected/SUPERSEDED, and a ' +
          'late older one is answered so on arrival, as is one older than a frame of its stream sent to the device on that worker in the last 2 s; ' +
          'requests already on the device are never touched',
      ),
  })
  .describe('Requests with a streamKey (e.g. video frames of one camera)');

export const VersionPolicySchema = z
  .discriminatedUnion('kind', [
    z.strictObject({ kind: z.literal('latest'), count: z.number().int().positive().default(1) }),
    z.strictObject({ kind: z.literal('specific'), versions: z.array(z.number().int().positive()).min(1) }),
  ])
  .describe('Which versions are served: the latest `count`, or a specific list');

export const ModelConfigSchema = z
  .strictObject({
    name: ModelNameSchema,
    description: z.string().max(1000).optional().describe('Free text for humans'),
    platform: z
      .enum(['onnx', 'om'])
      .default(MODEL_DEFAULTS.platform)
      .describe('What the model was made for (onnx: the simulator, om: a real NPU); informational: the backend decides which file loads, model.onnx on the simulator, model.om on CANN'),
    inputs: z.array(ModelTensorSchema).min(1).describe('Model inputs (the dynamic-batch input is implicit)'),
    outputs: z.array(ModelTensorSchema).min(1).describe('Model outputs'),
    maxBatchSize: z
      .number()
      .int()
      .positive()
      .max(1024)
      .default(MODEL_DEFAULTS.maxBatchSize)
      .describe('Largest batch (items) ever dispatched'),
    batchGears: z
      .array(z.number().int().positive())
      .min(1)
      .refine(strictlyIncreasing, { error: increasingError, params: { saysFix: true } })
      .optional()
      .describe('Batch sizes the compiled model accepts; default: powers of two up to maxBatchSize'),
    priorityLevels: z
      .number()
      .int()
      .min(1)
      .max(MAX_PRIORITY_LEVELS)
      .default(MODEL_DEFAULTS.priorityLevels)
      .describe('Number of priority levels; 0 is most urgent'),
    defaultPriority: z
      .number()
      .int()
      .min(0)
      .default(MODEL_DEFAULTS.defaultPriority)
      .describe('Priority of requests that set none'),
    maxQueueDelayMs: z
      .array(z.number().nonnegative())
      .optional()
      .describe('Per priority level: longest wait for a fuller batch (0 dispatches at once)'),
    queue: z
      .strictObject({
        softLimitItems: z
          .number()
          .int()
          .positive()
          .default(MODEL_DEFAULTS.softLimitItems)
          .describe('Queued items at which intake pauses (backpressure)'),
        hardLimitItems: z
          .number()
          .int()
          .positive()
          .default(MODEL_DEFAULTS.hardLimitItems)
          .describe('Queued items beyond which requests are rejected'),
        softLimitBytes: z
          .number()
          .int()
          .positive()
          .default(MODEL_DEFAULTS.softLimitBytes)
          .describe('Queued request bytes (host memory) at which intake pauses (backpressure)'),
        hardLimitBytes: z
          .number()
          .int()
          .positive()
          .default(MODEL_DEFAULTS.hardLimitBytes)
          .describe('Queued request bytes beyond which requests are rejected'),
      })
      .default({
        softLimitItems: MODEL_DEFAULTS.softLimitItems,
        hardLimitItems: MODEL_DEFAULTS.hardLimitItems,
        softLimitBytes: MODEL_DEFAULTS.softLimitBytes,
        hardLimitBytes: MODEL_DEFAULTS.hardLimitBytes,
      }),
    lateResults: z
      .enum(['deliver', 'drop'])
      .default(MODEL_DEFAULTS.lateResults)
      .describe('deliver: ok+late; drop: report late results as expired'),
    buckets: BucketsSchema.optional(),
    targetLatencyMs: z
      .number()
      .positive()
      .default(MODEL_DEFAULTS.targetLatencyMs)
      .describe('Batch latency goal driving the adaptive batch-size limit'),
    execTimeoutMs: z
      .number()
      .positive()
      .default(MODEL_DEFAULTS.execTimeoutMs)
      .describe('A batch still on the device after this is late (it is let finish)'),
    versionPolicy: VersionPolicySchema.default({ kind: 'latest', count: 1 }),
    streams: StreamsSchema.default({ superseded: MODEL_DEFAULTS.streamsSuperseded }),
  })
  .superRefine((c, ctx) => {
    if (c.defaultPriority >= c.priorityLevels) {
      ctx.addIssue({
        code: 'custom',
        path: ['defaultPriority'],
        message: `must be below priorityLevels (${c.priorityLevels})`,
      });
    }
    if (c.maxQueueDelayMs && c.maxQueueDelayMs.length !== c.priorityLevels) {
      ctx.addIssue({
        code: 'custom',
        path: ['maxQueueDelayMs'],
        message: `needs one entry per priority level (${c.priorityLevels}), got ${c.maxQueueDelayMs.length}`,
      });
    }
    const gears = c.batchGears;
    if (gears && (gears[gears.length - 1] ?? 0) > c.maxBatchSize) {
      ctx.addIssue({ code: 'custom', path: ['batchGears'], message: `gears must not exceed maxBatchSize (${c.maxBatchSize})` });
    }
    if (c.queue.softLimitItems > c.queue.hardLimitItems) {
      ctx.addIssue({ code: 'custom', path: ['queue', 'softLimitItems'], message: 'must not exceed queue.hardLimitItems' });
    }
    if (c.queue.softLimitBytes > c.queue.hardLimitBytes) {
      ctx.addIssue({ code: 'custom', path: ['queue', 'softLimitBytes'], message: 'must not exceed queue.hardLimitBytes' });
    }
    // Requests and results name their tensors: one name twice would make a model no request can fit.
    for (const [kind, list] of [
      ['inputs', c.inputs],
      ['outputs', c.outputs],
    ] as const) {
      list.forEach((t, i) => {
        const first = list.findIndex((u) => u.name === t.name);
        if (first < i) {
          ctx.addIssue({ code: 'custom', path: [kind, i, 'name'], message: `"${t.name}" is also the name of ${kind}[${first}]; each ${kind.slice(0, -1)} needs its own name` });
        }
      });
    }
    // A request is checked against these dims and a batch is one tensor per input: past the batch
    // axis only the bucketed axis may vary (request-validation refuses any other dynamic one).
    for (const [i, input] of c.inputs.entries()) {
      const axis = input.dims.findIndex((d, j) => j > 0 && d === -1 && !(c.buckets?.input === input.name && c.buckets.axis === j));
      if (axis > 0) {
        ctx.addIssue({
          code: 'custom',
          path: ['inputs', i, 'dims'],
          message: `axis ${axis} of input ${input.name} is dynamic (-1), but only a bucketed axis may vary past the batch: set the size the model takes, or bucket it (buckets: { input: ${input.name}, axis: ${axis}, bounds: [...] })`,
        });
      }
    }
    // The worker splits each output per request along its batch axis, the first -1 of its dims
    // (size / gear slots per item there): without one an output's results cannot be told apart,
    // and a bucketed model's per-position outputs are cut on the axis after a leading batch.
    for (const [i, out] of c.outputs.entries()) {
      const batchAxis = out.dims.indexOf(-1);
      if (batchAxis < 0) {
        ctx.addIssue({
          code: 'custom',
          path: ['outputs', i, 'dims'],
          message: `output ${out.name} [${out.dims.join(', ')}] has no -1: mark with -1 the axis that grows with the batch (usually axis 0, one row per item; [3, -1] for a model that puts the batch last), the worker splits the output per request along it`,
        });
      } else if (c.buckets && batchAxis > 0) {
        ctx.addIssue({
          code: 'custom',
          path: ['outputs', i, 'dims'],
          message: `output ${out.name} [${out.dims.join(', ')}] has its batch (the first -1) on axis ${batchAxis}; a bucketed model's outputs take the batch on axis 0 (dims [-1, ...])`,
        });
      }
    }
    const bucketed = c.buckets && c.inputs.find((i) => i.name === c.buckets?.input);
    if (c.buckets && !bucketed) {
      ctx.addIssue({ code: 'custom', path: ['buckets', 'input'], message: `names no input of the model (inputs: ${c.inputs.map((i) => i.name).join(', ')})` });
    }
    // Requests are checked and padded along this axis: past the rank no request could fit, and a
    // fixed axis would be padded to a bound the model cannot take.
    if (c.buckets && bucketed) {
      const { axis } = c.buckets;
      const dim = bucketed.dims[axis];
      if (dim === undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['buckets', 'axis'],
          message: `is ${axis} but input ${bucketed.name} has rank ${bucketed.dims.length} (dims [${bucketed.dims.join(', ')}]); use a dynamic axis 1..${bucketed.dims.length - 1}`,
        });
      } else if (dim !== -1) {
        ctx.addIssue({
          code: 'custom',
          path: ['buckets', 'axis'],
          message: `axis ${axis} of input ${bucketed.name} is fixed at ${dim}; bucket a dynamic (-1) axis or drop buckets`,
        });
      }
      // An output's one dynamic axis past the batch follows the length (per-position outputs):
      // the worker sizes it to the largest bound and cuts each request's result back to its own
      // length. A second one could not be told apart.
      for (const [i, out] of c.outputs.entries()) {
        const dynamic = out.dims.flatMap((d, j) => (j > 0 && d === -1 ? [j] : []));
        if (dynamic.length > 1) {
          ctx.addIssue({
            code: 'custom',
            path: ['outputs', i, 'dims'],
            message: `output ${out.name} [${out.dims.join(', ')}] has dynamic axes ${dynamic.join(' and ')}; a bucketed model's output may vary along one axis past the batch (the length), so fix the others`,
          });
        }
      }
    }
  });
export type ModelConfig = z.infer<typeof ModelConfigSchema>;

/** Gears actually used: the configured list, else powers of two up to maxBatchSize (inclusive). */
export function effectiveGears(config: Pick<ModelConfig, 'batchGears' | 'maxBatchSize'>): number[] {
  if (config.batchGears) return [...config.batchGears];
  const gears: number[] = [];
  for (let g = 1; g < config.maxBatchSize; g *= 2) gears.push(g);
  gears.push(config.maxBatchSize);
  return gears;
}

/** Per-priority delays: configured, else 0 for the top level and growing for the rest. */
export function effectiveQueueDelaysMs(config: Pick<ModelConfig, 'maxQueueDelayMs' | 'priorityLevels'>): number[] {
  if (config.maxQueueDelayMs) return [...config.maxQueueDelayMs];
  return Array.from({ length: config.priorityLevels }, (_, level) => (level === 0 ? 0 : 5 * 2 ** (level - 1)));
}
