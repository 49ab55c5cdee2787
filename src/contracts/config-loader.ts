import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LineCounter, parse as parseYaml, type YAMLError } from 'yaml';
import { FleetError } from '../errors/fleet-error.ts';
import { FLEET_DEFAULTS, FleetConfigSchema, type FleetConfig } from './fleet-config.ts';
import { ModelConfigSchema, type ModelConfig } from './model-config.ts';
import { applyEnvOverrides as applyFleetEnvOverrides, envOverrides, envSpellingHints, envVariableName, overridesBehind, type EnvOverride } from './env-overrides.ts';
import { validationError } from './validation-error.ts';

export { ENV_PREFIX } from './env-overrides.ts';

/** Why a file could not be read, in words; the errno's own message repeats the path. */
function unreadable(cause: unknown): string {
  switch ((cause as NodeJS.ErrnoException).code) {
    case 'ENOENT':
      return 'no such file';
    case 'EISDIR':
      return 'it is a directory';
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    default:
      return (cause as Error).message;
  }
}

/** `origin`: where the path came from, when not from the user's own argument (said in the message, with its fix). */
function readYaml(path: string, what: string, origin?: { variable: string }): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (cause) {
    const fix = origin ? `fix ${origin.variable} or unset it` : 'give the path of a YAML file';
    const from = origin ? ` (named by $${origin.variable})` : '';
    throw new FleetError('INVALID_CONFIG', `cannot read ${what} ${path}${from}: ${unreadable(cause)}; ${fix}`, { cause, details: { path } });
  }
  return yamlOf(text, path, what);
}

/**
 * Where the mistake a YAML error reports is, as an offset into `text`. The library points where
 * it found it out, which for three common mistakes is another line than the one to fix: an
 * unclosed quote or flow bracket is found at the next token (the next line, or past the end of
 * the file), so the opening quote and the place of the missing bracket are named instead; an
 * over-indented key (`   kafka:` under `  kind: kafka`) is found at the value it continues (the
 * line before), so the line of its colon is named.
 */
function mistakeAt(text: string, err: Partial<YAMLError>): number | undefined {
  const at = err.pos?.[0];
  if (at === undefined) return undefined;
  const message = err.message ?? '';
  const quote = err.code === 'MISSING_CHAR' ? /^Missing closing (["'])/.exec(message)?.[1] : undefined;
  if (quote !== undefined) {
    const opened = text.lastIndexOf(quote, at - 1);
    return opened >= 0 ? opened : at;
  }
  if (err.code === 'BAD_INDENT' && /end with a [\]}]/.test(message)) {
    // Just after the last thing written before the token that showed the bracket missing.
    let end = Math.min(at, text.length);
    while (end > 0 && /\s/.test(text[end - 1] ?? '')) end--;
    return end;
  }
  if (err.code === 'BLOCK_AS_IMPLICIT_KEY') {
    const colon = /:(?=[ \t\r\n]|$)/.exec(text.slice(at));
    const newline = text.lastIndexOf('\n', at + (colon?.index ?? 0));
    // The value runs on to the key of a later line: that line's first non-blank character.
    if (colon !== null && newline >= at) return newline + 1 + (/^[ \t]*/.exec(text.slice(newline + 1))?.[0].length ?? 0);
  }
  return at;
}

/**
 * The YAML library's own message quotes the offending line, which in a fleet config may be the
 * SASL password's (or a neighbour of it): the error names the line and column instead. Without
 * prettyErrors the cause holds no quote either (a logged cause or a crash report prints it).
 */
function yamlOf(text: string, path: string, what: string): unknown {
  const lineCounter = new LineCounter();
  try {
    return parseYaml(text, { prettyErrors: false, lineCounter }) ?? {};
  } catch (cause) {
    const at = mistakeAt(text, cause as Partial<YAMLError>);
    const where = at === undefined ? '' : ` at line ${lineCounter.linePos(at).line}, column ${lineCounter.linePos(at).col}`;
    throw new FleetError('INVALID_CONFIG', `${what} ${path} is not valid YAML: ${(cause as Error).message}${where}`, { cause });
  }
}

/**
 * `NPU_FLEET__SECTION__KEY=value` overrides on a fleet config, each value read as its field's type
 * (see env-overrides.ts).
 */
export function applyEnvOverrides(base: Record<string, unknown>, env: NodeJS.ProcessEnv): Record<string, unknown> {
  return applyFleetEnvOverrides(base, env, FleetConfigSchema);
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
  /** CLI flags: applied over the file and the env, section by section. */
  overrides?: Record<string, unknown>;
}

/** How fleet config errors word their hints: from the schema, and naming the variable that can give a missing field. */
const FLEET_HINTS = { schema: FleetConfigSchema, envName: envVariableName } as const;

export function parseFleetConfig(input: unknown, source = 'fleet config'): FleetConfig {
  const parsed = FleetConfigSchema.safeParse(input);
  if (!parsed.success) throw validationError(parsed.error, source, 'INVALID_CONFIG', undefined, FLEET_HINTS);
  return parsed.data;
}

/** The directory of package.json: the default modelRepository is under it. */
const PACKAGE_ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** Where a loaded config's settings came from (see settingOrigin); configs built otherwise have none. */
interface Origins {
  readonly file: string | undefined;
  readonly fromFile: Record<string, unknown>;
  readonly env: readonly EnvOverride[];
  readonly flags: Record<string, unknown>;
}

const ORIGINS = new WeakMap<object, Origins>();

/** Each section of a loaded config (transport.bullmq.tls), so a reader given only the section can say where a setting came from. */
const SECTIONS = new WeakMap<object, { readonly root: object; readonly path: readonly string[] }>();

function noteSections(root: object, node: Record<string, unknown>, path: readonly string[]): void {
  for (const [key, value] of Object.entries(node)) {
    if (!isMapping(value)) continue;
    SECTIONS.set(value, { root, path: [...path, key] });
    noteSections(root, value, [...path, key]);
  }
}

/** Where the value of one setting came from. */
export type SettingOrigin =
  | { readonly kind: 'env'; readonly variable: string }
  | { readonly kind: 'flag' }
  | { readonly kind: 'file'; readonly file: string }
  | { readonly kind: 'default'; readonly file: string | undefined }
  /** A config not read by loadFleetConfig (a test's parseFleetConfig). */
  | { readonly kind: 'unknown' };

const startsWith = (path: readonly string[], prefix: readonly string[]): boolean => prefix.every((seg, i) => path[i] === seg);

function holds(tree: unknown, path: readonly string[]): boolean {
  let at = tree;
  for (const seg of path) {
    if (!isMapping(at) || !Object.prototype.hasOwnProperty.call(at, seg)) return false;
    at = at[seg];
  }
  return true;
}

/**
 * Which layer set `path` (or a section holding it, or a key inside it) in a config that
 * loadFleetConfig returned: a flag, else an `NPU_FLEET__…` variable, else the file, else the default.
 */
export function settingOrigin(config: object, path: readonly string[]): SettingOrigin {
  const origins = ORIGINS.get(config);
  if (origins === undefined) {
    const section = SECTIONS.get(config);
    return section === undefined ? { kind: 'unknown' } : settingOrigin(section.root, [...section.path, ...path]);
  }
  if (holds(origins.flags, path)) return { kind: 'flag' };
  const related = origins.env.filter((o) => startsWith(path, o.path) || startsWith(o.path, path));
  // The last one applied wins, as in applyEnvOverrides; one naming the field itself before a section's.
  const variable = related.filter((o) => o.path.length === path.length).at(-1) ?? related.at(-1);
  if (variable !== undefined) return { kind: 'env', variable: variable.name };
  if (origins.file !== undefined && holds(origins.fromFile, path)) return { kind: 'file', file: origins.file };
  return { kind: 'default', file: origins.file };
}

/**
 * The fix for a bad value of `path` found after loading (a directory that is not there, a file
 * that cannot be read), in words naming where the value came from: the variable when the
 * environment set it, never the file it is not in.
 */
export function settingFix(config: object, path: readonly string[]): string {
  const section = SECTIONS.get(config);
  const full = section === undefined ? path : [...section.path, ...path];
  const field = full.join('.');
  const origin = settingOrigin(config, path);
  switch (origin.kind) {
    case 'env':
      return `${field} was set by the environment variable ${origin.variable}: fix ${origin.variable} or unset it`;
    case 'flag':
      return `${field} was set by a command-line flag: fix the flag`;
    case 'file':
      return `set ${field} in the fleet config ${origin.file}`;
    case 'default':
      return `${field} is its default: set it in the fleet config${origin.file === undefined ? '' : ` ${origin.file}`} or with ${envVariableName(full)}`;
    case 'unknown':
      return `set ${field} in the fleet config`;
  }
}

/**
 * The command-line flags a loaded config was given, as the `NPU_FLEET__…` variables that set the
 * same values: a process the command starts (`npu-fleet start`'s workers, which take no such flags)
 * reads the file and the environment again, and without them would see another config than its
 * parent's (the file's or a variable's value the flag overrode, possibly an invalid one). A variable
 * set so replaces the one of that name the parent had; empty for a config not read by loadFleetConfig.
 */
export function flagOverridesAsEnv(config: object): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (node: Record<string, unknown>, path: readonly string[]): void => {
    for (const [key, value] of Object.entries(node)) {
      if (isMapping(value)) walk(value, [...path, key]);
      // Every flag today sets a scalar (--devices: devices.count); a list would need the env's own syntax.
      else if (typeof value === 'number' || typeof value === 'string' || typeof value === 'boolean') out[envVariableName([...path, key])] = String(value);
    }
  };
  walk(ORIGINS.get(config)?.flags ?? {}, []);
  return out;
}

export function loadFleetConfig(options: LoadFleetConfigOptions = {}): FleetConfig {
  const env = options.env ?? process.env;
  const file = options.file ?? env.NPU_FLEET_CONFIG;
  const fromFile = file ? readYaml(file, 'fleet config', options.file === undefined ? { variable: 'NPU_FLEET_CONFIG' } : undefined) : {};
  if (typeof fromFile !== 'object' || fromFile === null || Array.isArray(fromFile)) {
    throw new FleetError('INVALID_CONFIG', `fleet config ${file} must be a YAML mapping at the top level`);
  }
  // Precedence: file < environment < flags (a flag typed on the command line wins over the Deployment's env).
  const merged = mergeSections(applyEnvOverrides(fromFile as Record<string, unknown>, env), options.overrides ?? {});
  const parsed = FleetConfigSchema.safeParse(merged);
  if (parsed.success) {
    ORIGINS.set(parsed.data, { file: file || undefined, fromFile: fromFile as Record<string, unknown>, env: envOverrides(env), flags: options.overrides ?? {} });
    noteSections(parsed.data, parsed.data as unknown as Record<string, unknown>, []);
    // The default repository is the install's own example models, wherever the CLI runs from (an
    // installed `npu-fleet start --demo`); a path someone gave, relative or not, is used as given.
    if (settingOrigin(parsed.data, ['modelRepository']).kind === 'default') parsed.data.modelRepository = resolve(PACKAGE_ROOT, FLEET_DEFAULTS.modelRepository);
    return parsed.data;
  }
  // The file looks right when the bad value came from the environment: say which variable (never
  // its value), beside the field it set, and after the message for the rest (a variable that chose
  // transport.kind, one under a misspelt key).
  const overrides = envOverrides(env);
  const named = new Set<string>();
  const setBy = (path: readonly PropertyKey[]): string | undefined => {
    const at = path.map(String);
    if (holds(options.overrides ?? {}, at)) return undefined;
    const name = overrides.filter((o) => o.path.length <= at.length && startsWith(at, o.path)).at(-1)?.name;
    if (name !== undefined) named.add(name);
    return name;
  };
  const err = validationError(parsed.error, file ? `fleet config ${file}` : 'fleet config', 'INVALID_CONFIG', undefined, { ...FLEET_HINTS, setBy });
  const vars = overridesBehind(parsed.error.issues, env);
  if (vars.length === 0) throw err;
  const hints = envSpellingHints(parsed.error.issues, env, FleetConfigSchema);
  const others = vars.filter((v) => !named.has(v));
  throw new FleetError('INVALID_CONFIG', `${err.message}${others.length === 0 ? '' : `; set by the environment: ${others.join(', ')}`}${hints.map((h) => `; ${h}`).join('')}`, {
    cause: err.cause,
    details: { ...err.details, env: vars },
  });
}

export function parseModelConfig(input: unknown, source = 'model config'): ModelConfig {
  const parsed = ModelConfigSchema.safeParse(input);
  if (!parsed.success) throw validationError(parsed.error, source, 'INVALID_CONFIG', undefined, { schema: ModelConfigSchema });
  return parsed.data;
}

export function loadModelConfig(path: string): ModelConfig {
  return parseModelConfig(readYaml(path, 'model config'), `model config ${path}`);
}

/** A model config.yaml already read (by a caller that reads files its own way: the repository poll). */
export function modelConfigFromYaml(text: string, path: string): ModelConfig {
  return parseModelConfig(yamlOf(text, path, 'model config'), `model config ${path}`);
}
