import type { CodecLimits } from '../contracts/limits.ts';
import { identityOf, tooBig } from './frame.ts';

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACE = 0x7d;
const CLOSE_BRACKET = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;
/** Keys and identity values longer than this are not worth unescaping for an error message. */
const MAX_CAPTURED = 1024;

/** Whether the quote at `at` is escaped: an odd run of backslashes before it. */
function escaped(text: string, at: number): boolean {
  let n = 0;
  for (let i = at - 1; i >= 0 && text.charCodeAt(i) === BACKSLASH; i--) n++;
  return n % 2 === 1;
}

function stringAt(text: string, start: number, end: number): string | undefined {
  if (end - start > MAX_CAPTURED) return undefined;
  try {
    const value: unknown = JSON.parse(text.slice(start, end + 1));
    return typeof value === 'string' ? value : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Refuses JSON text that describes more values than a frame header may, before JSON.parse builds
 * them. JSON.parse allocates whatever the text describes: 64 MiB of `[` took 10 s and 1.8 GB of
 * heap, `[{},{},...]` 17 s and 1.3 GB, both within limits.maxMessageBytes, and the worker's event
 * loop stood still meanwhile. A request or result in JSON holds the same header as its frame plus
 * one base64 string per tensor, so its structural characters ({ [ , : outside strings) are held to
 * limits.maxHeaderBytes. One pass; strings are skipped with indexOf, so base64 costs next to nothing.
 * The error names the top-level field the excess was in, with the id and model seen before it.
 */
export function checkJsonStructure(text: string, limits: CodecLimits): void {
  let budget = limits.maxHeaderBytes;
  let depth = 0;
  // In a top-level object: the key whose value is being read, and whether a key comes next.
  let topObject = false;
  let key: string | undefined;
  let keyNext = false;
  const seen: Record<string, unknown> = {};
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      let end = text.indexOf('"', i + 1);
      while (end !== -1 && escaped(text, end)) end = text.indexOf('"', end + 1);
      if (end === -1) return; // unterminated: JSON.parse says so
      if (depth === 1 && topObject) {
        if (keyNext) key = stringAt(text, i, end) ?? text.slice(i + 1, Math.min(end, i + 65));
        else if (key === 'id' || key === 'model' || key === 'replyTo') seen[key] = stringAt(text, i, end);
        keyNext = false;
      }
      i = end;
      continue;
    }
    if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      depth++;
      if (depth === 1) topObject = keyNext = c === OPEN_BRACE;
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      depth--;
      continue;
    } else if (c === COMMA) {
      if (depth === 1) keyNext = true;
    } else if (c !== COLON) {
      continue;
    }
    if (--budget < 0) {
      // Deeper than the top level: the field it is in (an empty key shown as ""); at the top level, the message itself.
      const field = depth >= 2 && topObject && key !== undefined ? key || '""' : '(message)';
      throw tooBig(
        `${field === '(message)' ? 'message' : field} holds more JSON values or nesting than a frame header may (over ${limits.maxHeaderBytes} ` +
          `brackets, commas and colons: limits.maxHeaderBytes; tensor data as base64 strings does not count); flatten or trim it`,
        field,
        identityOf(seen),
      );
    }
  }
}
