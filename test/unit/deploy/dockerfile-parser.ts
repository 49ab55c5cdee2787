// Just enough of Dockerfile and .dockerignore syntax to check the project's own files without a
// Docker engine: instructions, stages, global ARGs in FROM, COPY/RUN flags, exec and shell forms.

export interface Instruction {
  keyword: string;
  /** Flags before the arguments (`--from=build`, `--mount=...`), without the leading dashes. */
  flags: Record<string, string>;
  args: string;
  line: number;
}

export interface Stage {
  image: string;
  name: string | undefined;
  instructions: Instruction[];
}

export interface Dockerfile {
  stages: Stage[];
}

export interface Copy {
  from: string | undefined;
  sources: string[];
  dest: string;
}

/** Lines joined at trailing backslashes; comment lines (also inside a continuation) dropped. */
function logicalLines(text: string): Array<{ text: string; line: number }> {
  const out: Array<{ text: string; line: number }> = [];
  let pending: { text: string; line: number } | undefined;
  text.split('\n').forEach((raw, i) => {
    const trimmed = raw.trim();
    if (trimmed.startsWith('#') || (trimmed === '' && pending === undefined)) return;
    const continues = trimmed.endsWith('\\');
    const body = continues ? trimmed.slice(0, -1) : trimmed;
    pending = pending ? { text: `${pending.text} ${body}`, line: pending.line } : { text: body, line: i + 1 };
    if (!continues) {
      out.push(pending);
      pending = undefined;
    }
  });
  if (pending) out.push(pending);
  return out;
}

function expand(value: string, vars: Record<string, string>): string {
  return value.replace(/\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)/g, (_m, braced: string | undefined, fallback: string | undefined, bare: string | undefined) => {
    const name = braced ?? bare ?? '';
    return vars[name] ?? fallback ?? '';
  });
}

function splitFlags(rest: string): { flags: Record<string, string>; args: string } {
  const flags: Record<string, string> = {};
  let args = rest.trim();
  for (let m = /^--([\w-]+)(?:=(\S*))?\s*/.exec(args); m; m = /^--([\w-]+)(?:=(\S*))?\s*/.exec(args)) {
    flags[m[1] ?? ''] = m[2] ?? 'true';
    args = args.slice(m[0].length);
  }
  return { flags, args };
}

export function parseDockerfile(text: string): Dockerfile {
  const globalArgs: Record<string, string> = {};
  const stages: Stage[] = [];
  for (const { text: lineText, line } of logicalLines(text)) {
    const m = /^(\w+)\s*(.*)$/.exec(lineText);
    if (!m) throw new Error(`Dockerfile line ${line}: cannot parse "${lineText}"`);
    const keyword = (m[1] ?? '').toUpperCase();
    const { flags, args } = splitFlags(m[2] ?? '');
    const current = stages.at(-1);
    if (keyword === 'FROM') {
      const [image = '', as, name] = expand(args, globalArgs).split(/\s+/);
      stages.push({ image, name: as?.toUpperCase() === 'AS' ? name : undefined, instructions: [] });
    } else if (current === undefined) {
      if (keyword !== 'ARG') throw new Error(`Dockerfile line ${line}: ${keyword} before the first FROM`);
      const eq = args.indexOf('=');
      if (eq > 0) globalArgs[args.slice(0, eq)] = args.slice(eq + 1);
    } else {
      current.instructions.push({ keyword, flags, args, line });
    }
  }
  return { stages };
}

/** Exec form (a JSON array) as is; shell form as Docker runs it. */
export function commandOf(args: string): string[] {
  const trimmed = args.trim();
  if (trimmed.startsWith('[')) return JSON.parse(trimmed) as string[];
  return ['/bin/sh', '-c', trimmed];
}

export function copyOf(ins: Instruction): Copy {
  const trimmed = ins.args.trim();
  const words = trimmed.startsWith('[') ? (JSON.parse(trimmed) as string[]) : trimmed.split(/\s+/);
  if (words.length < 2) throw new Error(`Dockerfile line ${ins.line}: COPY needs a source and a destination`);
  return { from: ins.flags.from, sources: words.slice(0, -1), dest: words.at(-1) ?? '' };
}

/** `ENV A=1 B="two words"` (and the legacy `ENV A 1`). */
export function envOf(ins: Instruction): Record<string, string> {
  const legacy = /^(\w+)\s+([^=]*)$/.exec(ins.args.trim());
  if (legacy) return { [legacy[1] ?? '']: legacy[2] ?? '' };
  const env: Record<string, string> = {};
  for (const m of ins.args.matchAll(/(\w+)=("(?:[^"\\]|\\.)*"|\S*)/g)) {
    const raw = m[2] ?? '';
    env[m[1] ?? ''] = raw.startsWith('"') ? (JSON.parse(raw) as string) : raw;
  }
  return env;
}

export function instructionsOf(stage: Stage, keyword: string): Instruction[] {
  return stage.instructions.filter((i) => i.keyword === keyword);
}

/** The stage's last value of a single-valued instruction (WORKDIR, USER, ENTRYPOINT, ...). */
export function lastOf(stage: Stage, keyword: string): Instruction | undefined {
  return instructionsOf(stage, keyword).at(-1);
}

function patternRegExp(pattern: string): RegExp {
  let re = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i] ?? '';
    if (c === '*' && pattern[i + 1] === '*') {
      // `**/` is any number of directories, zero included; a trailing `**` is anything.
      const slash = pattern[i + 2] === '/';
      re += slash ? '(?:.*/)?' : '.*';
      i += slash ? 2 : 1;
    } else if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else if (c === '[') {
      const end = pattern.indexOf(']', i);
      re += end > i ? pattern.slice(i, end + 1).replace(/^\[!/, '[^') : '\\[';
      if (end > i) i = end;
    } else if (c === '\\' && i + 1 < pattern.length) re += `\\${pattern[++i] ?? ''}`;
    else re += c.replace(/[.+^${}()|\\]/g, '\\$&');
  }
  return new RegExp(`^${re}$`);
}

/**
 * Docker's .dockerignore rules (moby/patternmatcher): patterns relative to the context root, a
 * pattern also excludes everything below a directory it matches, `!` re-includes, the last
 * matching pattern decides.
 */
export function dockerIgnore(text: string): (path: string) => boolean {
  const patterns = text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => {
      const exclusion = l.startsWith('!');
      const body = (exclusion ? l.slice(1).trim() : l).replace(/^\/+/, '').replace(/\/+$/, '').replace(/\/\.\//g, '/');
      return { exclusion, re: patternRegExp(body) };
    });
  return (path) => {
    const parts = path.split('/');
    const prefixes = parts.map((_, i) => parts.slice(0, i + 1).join('/'));
    let ignored = false;
    for (const p of patterns) {
      if (prefixes.some((prefix) => p.re.test(prefix))) ignored = !p.exclusion;
    }
    return ignored;
  };
}
