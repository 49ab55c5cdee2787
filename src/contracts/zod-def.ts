import type { z } from 'zod';

/**
 * The parts of a zod schema's definition that config errors and environment overrides walk: zod
 * exposes them only as `_zod.def`, untyped for our purposes. One place, so a zod upgrade that
 * moves them breaks one file.
 */
export interface ZodDef {
  type: string;
  shape?: Record<string, z.core.$ZodType>;
  element?: z.core.$ZodType;
  options?: z.core.$ZodType[];
  innerType?: z.core.$ZodType;
  in?: z.core.$ZodType;
  out?: z.core.$ZodType;
  entries?: Record<string, unknown>;
  values?: unknown[];
}

export const defOf = (schema: z.core.$ZodType): ZodDef => schema._zod.def as unknown as ZodDef;

/** Schema types that only wrap another (`innerType`): a field's kinds, keys and options are its inner type's. */
export const WRAPPER_TYPES: ReadonlySet<string> = new Set(['default', 'prefault', 'optional', 'nullable', 'readonly', 'catch', 'nonoptional']);
