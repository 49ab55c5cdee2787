import { z } from 'zod';

/** Defaults for wire limits; checked by the codec before any allocation. */
export const LIMIT_DEFAULTS = {
  maxMessageBytes: 64 * 1024 * 1024,
  maxHeaderBytes: 64 * 1024,
  maxElementsPerTensor: 16 * 1024 * 1024,
  maxTensors: 16,
  maxMetaBytes: 4096,
} as const;

export const CodecLimitsSchema = z
  .strictObject({
    maxMessageBytes: z
      .number()
      .int()
      .positive()
      .default(LIMIT_DEFAULTS.maxMessageBytes)
      .describe('Largest accepted message (frame or JSON) in bytes'),
    maxHeaderBytes: z
      .number()
      .int()
      .positive()
      .default(LIMIT_DEFAULTS.maxHeaderBytes)
      .describe(
        'Largest JSON header inside a binary frame, in bytes; also the most brackets, commas and colons (outside strings) a JSON message may hold',
      ),
    maxElementsPerTensor: z
      .number()
      .int()
      .positive()
      .default(LIMIT_DEFAULTS.maxElementsPerTensor)
      .describe('Largest element count of one tensor'),
    maxTensors: z.number().int().positive().default(LIMIT_DEFAULTS.maxTensors).describe('Most tensors in one envelope'),
    maxMetaBytes: z
      .number()
      .int()
      .positive()
      .default(LIMIT_DEFAULTS.maxMetaBytes)
      .describe('Largest `meta` object, measured as UTF-8 JSON bytes'),
  })
  .describe('Wire limits enforced before allocation');
export type CodecLimits = z.infer<typeof CodecLimitsSchema>;

export const DEFAULT_LIMITS: CodecLimits = CodecLimitsSchema.parse({});
