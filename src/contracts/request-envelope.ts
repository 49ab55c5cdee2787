import { z } from 'zod';
import { TensorMetaSchema, TensorSchema } from './tensor.ts';

export const MODEL_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
export const MAX_PRIORITY_LEVELS = 16;

/**
 * An unpaired UTF-16 surrogate. Ids travel as UTF-8 (Kafka keys, BullMQ job ids in Redis, headers),
 * where each one becomes U+FFFD: two distinct ids would become the same key.
 */
export const LONE_SURROGATE = /\p{Cs}/u;

export const RequestIdSchema = z
  .string()
  .min(1, 'id must not be empty')
  .max(128, 'id must be at most 128 characters')
  .refine((s) => !LONE_SURROGATE.test(s), 'id holds a lone UTF-16 surrogate, which UTF-8 (Kafka keys, job ids) cannot carry; use well-formed Unicode')
  .describe('Unique request id: correlation and idempotency key');

export const ModelNameSchema = z
  .string()
  .regex(MODEL_NAME_PATTERN, 'model must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$')
  .describe('Model name in the repository');

export const EpochMsSchema = z
  .number()
  .int('must be an integer number of epoch milliseconds')
  .nonnegative('must be epoch milliseconds >= 0')
  .max(8.64e15, 'is not a valid epoch-ms time');

export const MetaSchema = z
  .record(z.string(), z.unknown())
  .describe('Caller data echoed back untouched (at most 4 KiB as JSON)');

/** Every request field except the tensors' bytes: shared by all representations. */
export const RequestBaseSchema = z.object({
  id: RequestIdSchema,
  model: ModelNameSchema,
  version: z.string().min(1).max(64).optional().describe('Pin a model version; default: the version policy'),
  priority: z
    .number()
    .int('priority must be an integer')
    .min(0, 'priority must be >= 0 (0 is most urgent)')
    .max(MAX_PRIORITY_LEVELS - 1, `priority must be < ${MAX_PRIORITY_LEVELS}`)
    .optional()
    .describe('0 is most urgent; default from the model config'),
  deadlineAt: EpochMsSchema.optional().describe('Absolute deadline, epoch ms; after it the result is worthless'),
  replyTo: z.string().min(1).max(249).optional().describe('Reply topic (Kafka) or queue (BullMQ)'),
  streamKey: z.string().min(1).max(256).optional().describe('Orders a stream (video); the Kafka message key'),
  createdAt: EpochMsSchema.describe('Set by the producer, epoch ms; end-to-end latency is measured from it'),
  meta: MetaSchema.optional(),
});

const inputsOf = <T extends z.ZodType>(tensor: T) =>
  z
    .array(tensor)
    .min(1, 'inputs needs at least one tensor')
    .describe('Input tensors; shape[0] of each is the number of samples in this request');

/** The decoded request as the runtime sees it. */
export const RequestEnvelopeSchema = RequestBaseSchema.extend({ inputs: inputsOf(TensorSchema) });
export type RequestEnvelope = z.infer<typeof RequestEnvelopeSchema>;

/** Binary-frame header: tensor metadata plus the byte length of each tensor's payload. */
export const RequestFrameHeaderSchema = RequestBaseSchema.extend({
  inputs: inputsOf(TensorMetaSchema.extend({ byteLength: z.number().int().nonnegative() })),
});

/** JSON wire form: tensor bytes as base64 strings (for curl-level tools and BullMQ job data). */
export const RequestJsonSchema = RequestBaseSchema.extend({
  inputs: inputsOf(TensorMetaSchema.extend({ data: z.string().describe('base64 of the raw little-endian bytes') })),
});
export type RequestJson = z.infer<typeof RequestJsonSchema>;
