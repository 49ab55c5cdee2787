import type { z } from 'zod';
import { FleetError } from '../errors/fleet-error.ts';
import { defOf, WRAPPER_TYPES } from './zod-def.ts';

export const ENV_PREFIX = 'NPU_FLEET__';

/** One `NPU_FLEET__…` variable: its name and the config path it sets. */
export interface EnvOverride {
  readonly name: string;
  readonly path: readonly string[];
}

/** `DRAIN_TIMEOUT_MS` → `drainTimeoutMs`. */
function camel(segment: string): string {
  return segment.toLowerCase().replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

/** The override variables of `env`, in the order they apply. */
export function envOverrides(env: NodeJS.ProcessEnv): EnvOverride[] {
  return Object.keys(env)
    .filter((k) => k.startsWith(ENV_PREFIX))
    .sort()
    .map((name) => ({ name, path: name.slice(ENV_PREFIX.length).split('__').filter(Boolean).map(camel) }))
    .filter((o) => o.path.length > 0);
}

/** What a field accepts, as far as reading an environment value needs to know. */
type Kind = 'string' | 'number' | 'boolean' | 'object' | 'null' | 'unknown' | { array: Set<Kind> };


/** The kinds `schema` accepts at `path`; empty when no such field exists. */
function kindsAt(schema: z.core.$ZodType, path: readonly string[]): Set<Kind> {
  const def = defOf(schema);
  if (WRAPPER_TYPES.has(def.type)) return def.innerType ? kindsAt(def.innerType, path) : new Set(['unknown']);
  switch (def.type) {
    case 'pipe': {
      // A preprocess is a pipe from a transform: what it finally checks is the output's type.
      const side = def.in && defOf(def.in).type === 'transform' ? def.out : def.in;
      return side ? kindsAt(side, path) : new Set(['unknown']);
    }
    case 'union': {
      const out = new Set<Kind>();
      for (const option of def.options ?? []) for (const k of kindsAt(option, path)) out.add(k);
      return out;
    }
    case 'object': {
      if (path.length === 0) return new Set(['object']);
      const [head, ...rest] = path as [string, ...string[]];
      const field = def.shape?.[head];
      return field === undefined ? new Set() : kindsAt(field, rest);
    }
    default:
      break;
  }
  if (path.length > 0) return def.type === 'unknown' || def.type === 'any' ? new Set(['unknown']) : new Set();
  switch (def.type) {
    case 'string':
    case 'enum':
      return new Set(['string']);
    case 'number':
    case 'int':
      return new Set(['number']);
    case 'boolean':
      return new Set(['boolean']);
    case 'array':
      return new Set([{ array: def.element ? kindsAt(def.element, []) : new Set(['unknown']) }]);
    case 'literal':
      return new Set((def.values ?? []).map((v) => (v === null ? 'null' : (typeof v as Kind))));
    default:
      return new Set(['unknown']);
  }
}

function kindOf(value: unknown): Kind {
  if (value === null) return 'null';
  if (Array.isArray(value)) return { array: new Set() };
  const t = typeof value;
  return t === 'string' || t === 'number' || t === 'boolean' ? t : 'object';
}

const sameKind = (a: Kind, b: Kind): boolean => (typeof a === 'string' || typeof b === 'string' ? a === b : true);

/**
 * An environment value read as its field's type. JSON when the field takes what the JSON is
 * (`5000`, `true`, `["a:9092"]`, `"quoted text"`); for a text field anything else is the text as
 * given (a password `12345678901234567890` or `1.50`, a group id `42`); for a list field a comma
 * list (`NPU_FLEET__MODELS=mlp,resnet`). A path outside the schema gets JSON or text, and the
 * schema then reports the key as unknown.
 */
function envValue(raw: string, kinds: ReadonlySet<Kind>): unknown {
  let parsed: { value: unknown } | undefined;
  try {
    parsed = { value: JSON.parse(raw) };
  } catch {
    parsed = undefined;
  }
  const known = [...kinds].filter((k) => k !== 'unknown');
  if (known.length === 0) return parsed ? parsed.value : raw;
  if (parsed && known.some((k) => sameKind(k, kindOf(parsed.value)))) return parsed.value;
  const list = known.find((k): k is { array: Set<Kind> } => typeof k === 'object');
  if (list) return raw.split(',').map((s) => envValue(s.trim(), list.array));
  if (known.includes('string')) return raw;
  return parsed ? parsed.value : raw;
}

/**
 * A list field's value written as an array that is not JSON (`['a','b']`, YAML's `[a, b]`, a
 * missing bracket) was split on commas into items with brackets and quotes in them: a model name
 * `'a'` that no repository holds, found only once a worker started. Such a value is refused,
 * naming the variable (not its value, as every env error). A bracketed IPv6 host (`[::1]:9092`)
 * is a comma-list item and passes.
 */
function refuseBrokenArray(name: string, path: readonly string[], raw: string, kinds: ReadonlySet<Kind>): void {
  const text = raw.trim();
  if (![...kinds].some((k) => typeof k === 'object')) return;
  if (!text.startsWith('[') || !(text.endsWith(']') || /^\[\s*["']/.test(text))) return;
  try {
    JSON.parse(text);
    return;
  } catch {
    throw new FleetError(
      'INVALID_CONFIG',
      `${name} (${path.join('.')}) starts with [ but is not a JSON array: write a comma list (a,b) or a JSON array with double quotes (["a","b"])`,
      { details: { field: path.join('.'), env: [name] } },
    );
  }
}

/**
 * Applies `NPU_FLEET__SECTION__KEY=value` overrides, e.g. `NPU_FLEET__WORKER__DRAIN_TIMEOUT_MS=5000`
 * or `NPU_FLEET__TRANSPORT__KAFKA__BROKERS=host1:9092,host2:9092`, each value read as the type
 * `schema` gives its field (see envValue).
 */
export function applyEnvOverrides(base: Record<string, unknown>, env: NodeJS.ProcessEnv, schema: z.core.$ZodType): Record<string, unknown> {
  const out = structuredClone(base);
  for (const { name, path } of envOverrides(env)) {
    let node: Record<string, unknown> = out;
    for (const seg of path.slice(0, -1)) {
      const next = node[seg];
      if (typeof next !== 'object' || next === null || Array.isArray(next)) node[seg] = {};
      node = node[seg] as Record<string, unknown>;
    }
    const raw = env[name] ?? '';
    const kinds = kindsAt(schema, path);
    refuseBrokenArray(name, path, raw, kinds);
    node[path[path.length - 1] as string] = envValue(raw, kinds);
  }
  return out;
}

/** `['worker', 'drainTimeoutMs']` → `NPU_FLEET__WORKER__DRAIN_TIMEOUT_MS`, the inverse of `camel`. */
export function envVariableName(path: readonly string[]): string {
  return ENV_PREFIX + path.map((seg) => seg.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase()).join('__');
}

/** The keys of the object(s) `schema` accepts at `path` (every option of a union). */
function keysAt(schema: z.core.$ZodType, path: readonly string[]): Set<string> {
  const def = defOf(schema);
  if (WRAPPER_TYPES.has(def.type)) return def.innerType ? keysAt(def.innerType, path) : new Set();
  switch (def.type) {
    case 'pipe':
      return def.in ? keysAt(def.in, path) : new Set();
    case 'union': {
      const out = new Set<string>();
      for (const option of def.options ?? []) for (const k of keysAt(option, path)) out.add(k);
      return out;
    }
    case 'object': {
      if (path.length === 0) return new Set(Object.keys(def.shape ?? {}));
      const [head, ...rest] = path as [string, ...string[]];
      const field = def.shape?.[head];
      return field === undefined ? new Set() : keysAt(field, rest);
    }
    default:
      return new Set();
  }
}

/**
 * For a variable that set an unknown key only because a camelCase key was written without the `_`
 * between its words (`NPU_FLEET__WORKER__DRAINTIMEOUTMS`), the variable meant
 * (`NPU_FLEET__WORKER__DRAIN_TIMEOUT_MS`): the schema's own "unknown key" says nothing of the spelling.
 */
export function envSpellingHints(issues: readonly z.core.$ZodIssue[], env: NodeJS.ProcessEnv, schema: z.core.$ZodType): string[] {
  const hints: string[] = [];
  const overrides = envOverrides(env);
  for (const issue of issues) {
    if (issue.code !== 'unrecognized_keys') continue;
    const at = issue.path.map(String);
    const known = [...keysAt(schema, at)];
    for (const key of issue.keys) {
      const meant = known.find((k) => k.toLowerCase() === key.toLowerCase().replace(/_/g, ''));
      if (meant === undefined) continue;
      for (const o of overrides) {
        if (o.path.length <= at.length || o.path[at.length] !== key || !at.every((seg, i) => o.path[i] === seg)) continue;
        const path = [...at, meant, ...o.path.slice(at.length + 1)];
        hints.push(`for ${path.join('.')} set ${envVariableName(path)}, not ${o.name} (the words of a camelCase key are joined by _)`);
      }
    }
  }
  return hints;
}

/**
 * The variables behind the failed fields of `issues`: one that set the field or a section holding
 * it, one below an unknown key (a misspelt section), or one that set a section's `kind` when a
 * sibling of it fails (`NPU_FLEET__TRANSPORT__KIND=kafka` over a file without `transport.kafka`).
 */
export function overridesBehind(issues: readonly z.core.$ZodIssue[], env: NodeJS.ProcessEnv): string[] {
  const failed: Array<{ path: string[]; unknownKey: boolean }> = [];
  for (const issue of issues) {
    const at = issue.path.map(String);
    if (issue.code === 'unrecognized_keys') for (const key of issue.keys) failed.push({ path: [...at, key], unknownKey: true });
    else failed.push({ path: at, unknownKey: false });
  }
  const startsWith = (path: readonly string[], prefix: readonly string[]): boolean => prefix.every((seg, i) => path[i] === seg);
  const selectedBy = (path: readonly string[], o: EnvOverride): boolean =>
    o.path[o.path.length - 1] === 'kind' && path.length === o.path.length && startsWith(path, o.path.slice(0, -1));
  return envOverrides(env)
    .filter((o) => failed.some((f) => startsWith(f.path, o.path) || (f.unknownKey && startsWith(o.path, f.path)) || selectedBy(f.path, o)))
    .map((o) => o.name);
}
