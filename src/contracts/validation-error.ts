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

function hintFor(issue: z.core.$ZodIssue): string {
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
        : 'fix the value';
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
): FleetError {
  const issues = error.issues.slice(0, 10);
  const lines = issues.map((issue) => {
    const hint = hintFor(issue);
    return `${formatPath(issue.path)}: ${issue.message}${hint === '' ? '' : ` (${hint})`}`;
  });
  const firstPath = issues[0] ? formatPath(issues[0].path) : '(root)';
  const more = error.issues.length > issues.length ? `; and ${error.issues.length - issues.length} more` : '';
  return new FleetError(code, `invalid ${what}: ${lines.join('; ')}${more}`, {
    cause: cause ?? error,
    details: { field: firstPath, fields: issues.map((i) => formatPath(i.path)) },
  });
}
