import { z } from 'zod';
import { TensorMetaSchema, TensorSchema } from './tensor.ts';
import { EpochMsSchema, MetaSchema, RequestIdSchema } from './request-envelope.ts';

export const RESULT_STATUSES = ['ok', 'expired', 'rejected', 'invalid', 'failed'] as const;
export const ResultStatusSchema = z
  .enum(RESULT_STATUSES)
  .describe(
    'ok; expired (deadline passed before execution, no device time); rejected (admission refused); ' +
      'invalid (decode/validation failed); failed (device or model error)',
  );
export type ResultStatus = z.infer<typeof ResultStatusSchema>;

export const TimingsSchema = z
  .object({
    queuedMs: z.number().nonnegative().describe('From createdAt to arrival at the worker'),
    batchWaitMs: z.number().nonnegative().describe('Arrival at the worker to dispatch of its batch'),
    deviceMs: z.number().nonnegative().describe('Copy-in + execute + copy-out of its batch'),
    totalMs: z.number().nonnegative().describe('From createdAt to result publication'),
  })
  .describe('Where the time went, in milliseconds');
export type Timings = z.infer<typeof TimingsSchema>;

export const ZERO_TIMINGS: Timings = { queuedMs: 0, batchWaitMs: 0, deviceMs: 0, totalMs: 0 };

export const ResultBaseSchema = z.object({
  id: RequestIdSchema.or(z.literal('')).describe('The request id ("" when the message could not be decoded)'),
  model: z.string().max(64).describe('Model name as requested'),
  version: z.string().max(64).describe('Model version that served it ("" if none did)'),
  status: ResultStatusSchema,
  error: z
    .object({
      code: z.string().describe('Stable error code (FleetError code)'),
      message: z.string().describe('What went wrong and how to fix it'),
    })
    .optional(),
  late: z.boolean().optional().describe('ok, but the batch finished after the deadline'),
  timings: TimingsSchema,
  batchSize: z.number().int().nonnegative().describe('Real items in the batch that served it'),
  gear: z.number().int().nonnegative().describe('Compiled batch gear the batch was padded to'),
  device: z.number().int().min(-1).describe('Device index (-1: never reached a device)'),
  worker: z.string().max(128).describe('Worker identity'),
  completedAt: EpochMsSchema.optional().describe('When the result was produced, epoch ms'),
  meta: MetaSchema.optional(),
});

const outputsOf = <T extends z.ZodType>(tensor: T) => z.array(tensor).optional().describe('Output tensors (status ok)');

export const ResultEnvelopeSchema = ResultBaseSchema.extend({ outputs: outputsOf(TensorSchema) });
export type ResultEnvelope = z.infer<typeof ResultEnvelopeSchema>;

export const ResultFrameHeaderSchema = ResultBaseSchema.extend({
  outputs: outputsOf(TensorMetaSchema.extend({ byteLength: z.number().int().nonnegative() })),
});

export const ResultJsonSchema = ResultBaseSchema.extend({
  outputs: outputsOf(TensorMetaSchema.extend({ data: z.string().describe('base64 of the raw bytes') })),
});
export type ResultJson = z.infer<typeof ResultJsonSchema>;
