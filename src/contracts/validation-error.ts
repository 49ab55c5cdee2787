import type { z } from 'zod';
import { FleetError, type ErrorCode } from '../errors/fleet-error.ts';

/** Renders a zod issue path as `inputs[0].shape` so errors name the field exactly. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else out += out === '' ? String(key) : `.${String(key)}`;
  }
  return out === '' ? '(root)' : out;
}

interface Def {
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

const defOf = (schema: z.core.$ZodType): Def => schema._zod.def as unknown as Def;

/** Schema types that only wrap another (`innerType`). */
const WRAPPERS: ReadonlySet<string> = new Set(['default', 'prefault', 'optional', 'nullable', 'readonly', 'catch', 'nonoptional']);

/** The schema(s) below the wrappers and checks of `schema`: a preprocess's output, each option of a union. */
function unwrapped(schema: z.core.$ZodType): z.core.$ZodType[] {
  const def = defOf(schema);
  if (WRAPPERS.has(def.type)) return def.innerType ? unwrapped(def.innerType) : [];
  if (def.type === 'pipe') {
    const side = def.in && defOf(def.in).type === 'transform' ? def.out : def.in;
    return side ? unwrapped(side) : [];
  }
  return [schema];
}

/** The schemas a field at `path` may have (every option of a union on the way). */
function schemasAt(schema: z.core.$ZodType, path: readonly PropertyKey[]): z.core.$ZodType[] {
  const out: z.core.$ZodType[] = [];
  for (const s of unwrapped(schema)) {
    const def = defOf(s);
    if (path.length === 0) {
      out.push(s);
      continue;
    }
    const [head, ...rest] = path;
    if (def.type === 'union') for (const option of def.options ?? []) out.push(...schemasAt(option, path));
    else if (def.type === 'object' && typeof head === 'string' && def.shape?.[head] !== undefined) out.push(...schemasAt(def.shape[head], rest));
    else if (def.type === 'array' && typeof head === 'number' && def.element) out.push(...schemasAt(def.element, rest));
  }
  return out;
}

/** What one option of a union accepts, in words: `true or false`, `an object { a, b }`, `"x"`. */
function describeOption(schema: z.core.$ZodType): string[] {
  return unwrapped(schema).flatMap((s): string[] => {
    const def = defOf(s);
    switch (def.type) {
      case 'boolean':
        return ['true or false'];
      case 'object':
        return [`an object { ${Object.keys(def.shape ?? {}).join(', ')} }`];
      case 'union':
        return (def.options ?? []).flatMap(describeOption);
      case 'literal':
        return (def.values ?? []).map((v) => JSON.stringify(v));
      case 'enum':
        return [`one of ${Object.values(def.entries ?? {}).map((v) => JSON.stringify(v)).join(', ')}`];
      case 'array':
        return ['a list'];
      default:
        return [`${/^[aeiou]/.test(def.type) ? 'an' : 'a'} ${def.type}`];
    }
  });
}

/** `a`, `a or b`, `a, b, or c`. */
function orList(items: readonly string[]): string {
  if (items.length <= 1) return items[0] ?? '';
  // `true or false, or an object`: an item that holds an "or" itself is set off by a comma.
  return items.length === 2 ? `${items[0]}${items.some((i) => i.includes(' or ')) ? ',' : ''} or ${items[1]}` : `${items.slice(0, -1).join(', ')}, or ${items[items.length - 1]}`;
}

/** What a plain union at the issue's path accepts, from the schema (the issue itself names no option). */
function unionHint(issue: z.core.$ZodIssue, schema: z.core.$ZodType | undefined): string {
  const unions = schema === undefined ? [] : schemasAt(schema, issue.path).filter((s) => defOf(s).type === 'union');
  const options = unions.flatMap((u) => (defOf(u).options ?? []).flatMap(describeOption));
  if (options.length > 0) return `use ${orList([...new Set(options)])}`;
  // No schema to read: the types the options expected, as far as their issues tell.
  const expected =
    'errors' in issue ? [...new Set(issue.errors.flatMap((e) => e.filter((i) => i.path.length === 0 && i.code === 'invalid_type').map((i) => (i as { expected: string }).expected)))] : [];
  return expected.length > 0 ? `use ${orList(expected.map((e) => (e === 'boolean' ? 'true or false' : `${/^[aeiou]/.test(e) ? 'an' : 'a'} ${e}`)))}` : 'fix the value';
}

/**
 * A plain union whose input had the shape of exactly one option (an object for ssl's object form)
 * failed inside it: that option's own issues name the field and the fix, the union's "Invalid
 * input" neither.
 */
function flattenUnions(issues: readonly z.core.$ZodIssue[]): z.core.$ZodIssue[] {
  return issues.flatMap((issue): z.core.$ZodIssue[] => {
    if (issue.code !== 'invalid_union' || !('errors' in issue) || issue.errors.length === 0) return [issue];
    const inside = issue.errors.filter((errors) => errors.length > 0 && errors.every((e) => e.path.length > 0));
    const [only] = inside;
    if (inside.length !== 1 || only === undefined) return [issue];
    return flattenUnions(only.map((e) => ({ ...e, path: [...issue.path, ...e.path] })));
  });
}

function hintFor(issue: z.core.$ZodIssue, schema?: z.core.$ZodType): string {
  switch (issue.code) {
    case 'invalid_type': {
      const expected = `${/^[aeiou]/.test(issue.expected) ? 'an' : 'a'} ${issue.expected}`;
      return /received undefined$/.test(issue.message) ? `it is required: add it as ${expected}` : `set it to ${expected}`;
    }
    case 'unrecognized_keys':
      return issue.keys.length === 1 ? 'remove it or fix its spelling' : 'remove them or fix their spelling';
    case 'invalid_value':
      return `use one of ${issue.values.map((v) => JSON.stringify(v)).join(', ')}`;
    case 'invalid_union':
      // A discriminated union (transport.kind, versionPolicy.kind) lists its kinds; a plain union
      // has no one value to suggest.
      return 'options' in issue && issue.options !== undefined && issue.options.length > 0
        ? `use one of ${issue.options.map((v) => JSON.stringify(v)).join(', ')}`
        : unionHint(issue, schema);
    case 'too_small':
      return bound('at least', issue.origin, issue.minimum, issue.inclusive !== false, '>');
    case 'too_big':
      return bound('at most', issue.origin, issue.maximum, issue.inclusive !== false, '<');
    case 'custom':
      // A check whose message already says what to write (params.saysFix) needs no catch-all.
      return issue.params?.saysFix === true ? '' : 'fix the value';
    default:
      return 'fix the value';
  }
}

/** A size or range hint in the words of what was out of range (characters, items, a number). */
function bound(words: string, origin: string, limit: number | bigint, inclusive: boolean, op: '<' | '>'): string {
  const n = Number(limit);
  if (origin === 'string') return `make it ${words} ${n} character${n === 1 ? '' : 's'} long`;
  if (origin === 'array' || origin === 'set') return `give ${words} ${n} item${n === 1 ? '' : 's'}`;
  return `use a value ${op}${inclusive ? '=' : ''} ${String(limit)}`;
}

/** Turns a zod failure into one FleetError whose message names every bad field and the fix. */
export function validationError(
  error: z.ZodError,
  what: string,
  code: ErrorCode = 'INVALID_MESSAGE',
  cause?: unknown,
  /** The schema that failed: a plain union's hint lists what its options accept. */
  schema?: z.core.$ZodType,
): FleetError {
  const all = flattenUnions(error.issues);
  const issues = all.slice(0, 10);
  const lines = issues.map((issue) => {
    const hint = hintFor(issue, schema);
    return `${formatPath(issue.path)}: ${issue.message}${hint === '' ? '' : ` (${hint})`}`;
  });
  const firstPath = issues[0] ? formatPath(issues[0].path) : '(root)';
  const more = all.length > issues.length ? `; and ${all.length - issues.length} more` : '';
  return new FleetError(code, `invalid ${what}: ${lines.join('; ')}${more}`, {
    cause: cause ?? error,
    details: { field: firstPath, fields: issues.map((i) => formatPath(i.path)) },
  });
}
