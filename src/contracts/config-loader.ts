import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { FleetError } from '../errors/fleet-error.ts';
import { FleetConfigSchema, type FleetConfig } from './fleet-config.ts';
import { ModelConfigSchema, type ModelConfig } from './model-config.ts';
import { validationError } from './validation-error.ts';

export const ENV_PREFIX = 'NPU_FLEET__';

function readYaml(path: string, what: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (cause) {
    throw new FleetError('INVALID_CONFIG', `cannot read ${what} ${path}: ${(cause as Error).message}`, { cause });
  }
  try {
    return parseYaml(text) ?? {};
  } catch (cause) {
    throw new FleetError('INVALID_CONFIG', `${what} ${path} is not valid YAML: ${(cause as Error).message}`, { cause });
  }
}

/** `DRAIN_TIMEOUT_MS` → `drainTimeoutMs`. */
function camel(segment: string): string {
  return segment.toLowerCase().replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

/** Env values are JSON when they parse as JSON (numbers, booleans, arrays), else strings. */
function envValue(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

/**
 * Applies `NPU_FLEET__SECTION__KEY=value` overrides, e.g. `NPU_FLEET__WORKER__DRAIN_TIMEOUT_MS=5000`
 * or `NPU_FLEET__TRANSPORT__KAFKA__BROKERS='["127.0.0.1:9092"]'`. Comma lists become arrays for
 * keys whose current value is an array.
 */
export function applyEnvOverrides(base: Record<string, unknown>, env: NodeJS.ProcessEnv): Record<string, unknown> {
  const out = structuredClone(base);
  const keys = Object.keys(env)
    .filter((k) => k.startsWith(ENV_PREFIX))
    .sort();
  for (const key of keys) {
    const path = key.slice(ENV_PREFIX.length).split('__').filter(Boolean).map(camel);
    if (path.length === 0) continue;
    let node: Record<string, unknown> = out;
    for (const seg of path.slice(0, -1)) {
      const next = node[seg];
      if (typeof next !== 'object' || next === null || Array.isArray(next)) node[seg] = {};
      node = node[seg] as Record<string, unknown>;
    }
    const leaf = path[path.length - 1] as string;
    const raw = env[key] ?? '';
    let value = envValue(raw);
    if (Array.isArray(node[leaf]) && typeof value === 'string') value = value.split(',').map((s) => envValue(s.trim()));
    if (leaf === 'brokers' && typeof value === 'string') value = value.split(',').map((s) => s.trim());
    node[leaf] = value;
  }
  return out;
}

/** `over` on top of `base`, section by section: a flag setting devices.count keeps devices.backend. */
function mergeSections(base: Record<string, unknown>, over: Record<string, unknown>): Record<string, unknown> {
  const out = { ...base };
  for (const [key, value] of Object.entries(over)) {
    const below = out[key];
    out[key] = isMapping(below) && isMapping(value) ? mergeSections(below, value) : value;
  }
  return out;
}

const isMapping = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

export interface LoadFleetConfigOptions {
  /** YAML file; default: $NPU_FLEET_CONFIG, else none (all defaults). */
  file?: string | undefined;
  env?: NodeJS.ProcessEnv;
  /** Applied after the file and before env (CLI flags). */
  overrides?: Record<string, unknown>;
}

export function parseFleetConfig(input: unknown, source = 'fleet config'): FleetConfig {
  const parsed = FleetConfigSchema.safeParse(input);
  if (!parsed.success) throw validationError(parsed.error, source, 'INVALID_CONFIG');
  return parsed.data;
}

export function loadFleetConfig(options: LoadFleetConfigOptions = {}): FleetConfig {
  const env = options.env ?? process.env;
  const file = options.file ?? env.NPU_FLEET_CONFIG;
  const fromFile = file ? readYaml(file, 'fleet config') : {};
  if (typeof fromFile !== 'object' || fromFile === null || Array.isArray(fromFile)) {
    throw new FleetError('INVALID_CONFIG', `fleet config ${file} must be a YAML mapping at the top level`);
  }
  const merged = applyEnvOverrides(mergeSections(fromFile as Record<string, unknown>, options.overrides ?? {}), env);
  return parseFleetConfig(merged, file ? `fleet config ${file}` : 'fleet config');
}

export function parseModelConfig(input: unknown, source = 'model config'): ModelConfig {
  const parsed = ModelConfigSchema.safeParse(input);
  if (!parsed.success) throw validationError(parsed.error, source, 'INVALID_CONFIG');
  return parsed.data;
}

export function loadModelConfig(path: string): ModelConfig {
  return parseModelConfig(readYaml(path, 'model config'), `model config ${path}`);
}
