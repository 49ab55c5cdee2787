// The scheduler's public surface. Pure: no node:*, no I/O, no timers, no clock.
export { BatchScheduler } from './batch-scheduler.ts';
export { SCHEDULER_DEFAULTS, resolveSchedulerOptions, schedulerOptionsSchema } from './scheduler-options.ts';
export type { SchedulerOptions, SchedulerOptionsInput } from './scheduler-options.ts';
export { LIVE_SCHEDULER_OPTIONS } from './live-options.ts';
export type { LiveSchedulerOption, LiveSchedulerOptionsInput } from './live-options.ts';
export type {
  Batch,
  Decision,
  DispatchReason,
  EnqueueResult,
  FullBatchCost,
  LevelStats,
  RejectReason,
  SchedulerRequest,
  SchedulerStats,
} from './scheduler-types.ts';
export { supersededError } from './validate-request.ts';
export { DTYPES, DTYPE_BYTES, elementCount, encodeScalar, float16Bits, gatherBatch, scatterBatch, tensorBytes } from './gather.ts';
export type { DType, GatherOptions, Tensor } from './gather.ts';
export { AdaptiveLimit, quantile } from './adaptive-limit.ts';
export { DeviceTimeEstimator } from './device-time-estimator.ts';
