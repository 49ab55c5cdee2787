import { newLineCounter, type LineCounter } from '../producer/line-counter.ts';

export interface PhaseProgressOptions {
  readonly write: (line: string) => void;
  /** Between two progress lines; the first comes after one interval, so a short phase says nothing. */
  readonly intervalMs: number;
  /** Lines the phase will read, when known (an ETA by lines); else `totalBytes` gives one by bytes. */
  readonly totalLines?: number | undefined;
  readonly totalBytes?: number | undefined;
  readonly nowMs?: () => number;
}

/**
 * Runs `phase`, printing a progress line every `intervalMs` while it runs: a data set of tens of
 * millions of lines takes minutes to count, to check for repeated ids and to resume, and a command
 * silent that long looks hung.
 */
export async function withPhaseProgress<T>(what: string, o: PhaseProgressOptions, phase: (counter: LineCounter) => Promise<T>): Promise<T> {
  const now = o.nowMs ?? Date.now;
  const counter = newLineCounter();
  let startedAt = now();
  let lastLineAt = startedAt;
  let lastLines = 0;
  const timer = setInterval(() => {
    const at = now();
    // A phase that starts its reading over (the resume file read again by id) counts from there:
    // from the line before at the latest, as the lines counted now were read since then.
    if (counter.lines < lastLines) startedAt = lastLineAt;
    lastLines = counter.lines;
    lastLineAt = at;
    o.write(`${phaseLine(what, counter, at - startedAt, o)}\n`);
  }, o.intervalMs);
  timer.unref();
  try {
    return await phase(counter);
  } finally {
    clearInterval(timer);
  }
}

/** `publish: WHAT: N[ of T] lines[, P% of the file], R/s[, ~S s left]`, in the style of the run's progress line. */
export function phaseLine(what: string, counter: LineCounter, elapsedMs: number, total: Pick<PhaseProgressOptions, 'totalLines' | 'totalBytes'> = {}): string {
  const secs = Math.max(elapsedMs / 1000, 0.001);
  const rate = counter.lines / secs;
  const parts = [`${counter.lines}${total.totalLines === undefined ? '' : ` of ${total.totalLines}`} lines`];
  let leftSecs: number | undefined;
  if (total.totalLines !== undefined) {
    if (rate > 0) leftSecs = Math.max(0, total.totalLines - counter.lines) / rate;
  } else if (total.totalBytes !== undefined && total.totalBytes > 0) {
    parts.push(`${Math.min(100, Math.floor((counter.bytes / total.totalBytes) * 100))}% of the file`);
    if (counter.bytes > 0) leftSecs = Math.max(0, total.totalBytes - counter.bytes) / (counter.bytes / secs);
  }
  parts.push(`${Math.round(rate)}/s`);
  if (leftSecs !== undefined) parts.push(`~${Math.ceil(leftSecs)} s left`);
  return `publish: ${what}: ${parts.join(', ')}`;
}
