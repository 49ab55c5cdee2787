import type { z } from 'zod';
import { FleetError, type ErrorCode } from '../errors/fleet-error.ts';
import { defOf, WRAPPER_TYPES } from './zod-def.ts';

/** Renders a zod issue path as `inputs[0].shape` so errors name the field exactly. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else out += out === '' ? String(key) : `.${String(key)}`;
  }
  return out === '' ? '(root)' : out;
}


/** The schema(s) below the wrappers and checks of `schema`: a preprocess's output, each option of a union. */
function unwrapped(schema: z.core.$ZodType): z.core.$ZodType[] {
  const def = defOf(schema);
  if (WRAPPER_TYPES.has(def.type)) return def.innerType ? unwrapped(def.innerType) : [];
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

/** `drainTimeoutMs` and `drain_timeout_ms` alike. */
const folded = (key: string): string => key.toLowerCase().replace(/[_-]/g, '');

/** Units a key's name ends with (`drainTimeoutMs`, `maxMessageBytes`): a key written without one is that key. */
const UNIT_SUFFIX = /^(ms|mb|mib|kb|kib|bytes|items|seconds|s)$/;

/** Edits (insert, delete, replace, swap of neighbours) between two keys. */
function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  const at = (i: number, j: number): number => d[i]?.[j] ?? Number.POSITIVE_INFINITY;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, at(i - 2, j - 2) + 1);
      (d[i] as number[])[j] = best;
    }
  }
  return at(a.length, b.length);
}

/**
 * The known key a misspelt one most likely meant: the same but for case or `_`, the key with its
 * unit suffix (`drainTimeout` for `drainTimeoutMs`), else one or two letters off (one for short keys).
 */
function meantKey(key: string, known: readonly string[]): string | undefined {
  const k = folded(key);
  const same = known.find((c) => folded(c) === k);
  if (same !== undefined) return same;
  const suffixed = known.find((c) => folded(c).startsWith(k) && UNIT_SUFFIX.test(folded(c).slice(k.length)));
  if (suffixed !== undefined) return suffixed;
  // The start of one key only (`modelRepo`): long enough to mean it, not a guess among several.
  const started = k.length >= 5 ? known.filter((c) => folded(c).startsWith(k)) : [];
  if (started.length === 1) return started[0];
  const allowed = k.length >= 8 ? 2 : k.length >= 4 ? 1 : 0;
  const near = known.map((c) => ({ c, d: editDistance(k, folded(c)) })).filter((x) => x.d <= allowed).sort((x, y) => x.d - y.d);
  // Two candidates equally near: no guess.
  return near.length > 0 && (near.length === 1 || (near[1]?.d ?? 0) > (near[0]?.d ?? 0)) ? near[0]?.c : undefined;
}

/** The keys the object(s) at `path` of `schema` take. */
function keysAt(schema: z.core.$ZodType | undefined, path: readonly PropertyKey[]): string[] {
  if (schema === undefined) return [];
  const objects = (s: z.core.$ZodType): z.core.$ZodType[] =>
    unwrapped(s).flatMap((u) => (defOf(u).type === 'union' ? (defOf(u).options ?? []).flatMap(objects) : defOf(u).type === 'object' ? [u] : []));
  return [...new Set(schemasAt(schema, path).flatMap(objects).flatMap((s) => Object.keys(defOf(s).shape ?? {})))];
}

function unknownKeysHint(issue: z.core.$ZodIssue & { keys: string[] }, options: ValidationErrorOptions): string {
  const known = keysAt(options.schema, issue.path);
  const meant = issue.keys.map((key) => ({ key, meant: meantKey(key, known) })).filter((m): m is { key: string; meant: string } => m.meant !== undefined);
  const one = issue.keys.length === 1;
  if (meant.length === 0) return one ? 'remove it or fix its spelling' : 'remove them or fix their spelling';
  // A key a variable set (NPU_FLEET__WORKER__DRAIN_TIMEOUT): the variable meant, which is what to rename.
  const named = (m: { key: string; meant: string }): string => {
    const path = issue.path.map(String);
    const setBy = issue.path.every((seg) => typeof seg === 'string') ? options.setBy?.([...path, m.key]) : undefined;
    const variable = setBy === undefined ? undefined : options.envName?.([...path, m.meant]);
    return variable === undefined ? m.meant : `${m.meant} (${variable}, not ${setBy})`;
  };
  const guesses = one ? `${named(meant[0] as { key: string; meant: string })}` : meant.map((m) => `${named(m)} for ${JSON.stringify(m.key)}`).join(', ');
  return `did you mean ${guesses}? ${one ? 'rename it, or remove it' : 'rename them, or remove them'}`;
}

export interface ValidationErrorOptions {
  /** The schema that failed: a plain union's hint lists what its options accept, a misspelt key gets the key meant. */
  readonly schema?: z.core.$ZodType;
  /** The environment variable that can set a field (the fleet config's `NPU_FLEET__…`), said for a required one that is missing. */
  readonly envName?: (path: readonly string[]) => string;
  /** The environment variable that set the value at `path` (or a section holding it), said beside the field. */
  readonly setBy?: (path: readonly PropertyKey[]) => string | undefined;
}

function hintFor(issue: z.core.$ZodIssue, options: ValidationErrorOptions): string {
  const { schema } = options;
  switch (issue.code) {
    case 'invalid_type': {
      const expected = `${/^[aeiou]/.test(issue.expected) ? 'an' : 'a'} ${issue.expected}`;
      if (!/received undefined$/.test(issue.message)) return `set it to ${expected}`;
      // A leaf an environment variable can give: a secret is better given so than written in the file.
      const leaf = issue.expected !== 'object' && options.envName !== undefined && issue.path.every((seg) => typeof seg === 'string');
      if (!leaf) return `it is required: add it as ${expected}`;
      const path = issue.path.map(String);
      return `it is required: add it as ${expected}, or ${path.at(-1) === 'password' ? 'better ' : ''}set ${options.envName?.(path) ?? ''}`;
    }
    case 'unrecognized_keys':
      return unknownKeysHint(issue, options);
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
  options: ValidationErrorOptions = {},
): FleetError {
  const all = flattenUnions(error.issues);
  const issues = all.slice(0, 10);
  const lines = issues.map((issue) => {
    const hint = hintFor(issue, options);
    const setBy = options.setBy?.(issue.path);
    return `${formatPath(issue.path)}${setBy === undefined ? '' : ` (set by ${setBy})`}: ${issue.message}${hint === '' ? '' : ` (${hint})`}`;
  });
  const firstPath = issues[0] ? formatPath(issues[0].path) : '(root)';
  const more = all.length > issues.length ? `; and ${all.length - issues.length} more` : '';
  return new FleetError(code, `invalid ${what}: ${lines.join('; ')}${more}`, {
    cause: cause ?? error,
    details: { field: firstPath, fields: issues.map((i) => formatPath(i.path)) },
  });
}
