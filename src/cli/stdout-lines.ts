/**
 * The command's own output lines (reports, results, listings), such that a reader that went away
 * (`npu-fleet start | head -1`: EPIPE) ends the output instead of crashing the process. Node ignores
 * SIGPIPE and reports the failed write as an 'error' event on process.stdout: with no listener
 * that is an uncaught exception, a stack trace and exit 1, in the middle of whatever the command was
 * doing (the embedded fleet died with batches in flight).
 *
 * The approach of the log sink (src/observability/logger.ts stdoutLogSink): an 'error' listener,
 * and an error other than a full pipe ends writing to that stream for good. Unlike the log sink the
 * lines still go through process.stdout, which buffers rather than drops for a reader that is alive
 * but behind: a result line must not be lost where a log line may be.
 *
 * A closed stdout is not a stop by itself: commands that should stop the way a SIGPIPE would stop
 * a Unix tool subscribe with onStdoutClosed (start drains, load stops sending, publish is
 * interrupted). It is noticed only on a write, as SIGPIPE is.
 */
type Stdio = NodeJS.WritableStream;

interface Guard {
  /** The error code that ended the stream (EPIPE, EIO, ...); undefined while it is writable. */
  closedBy: string | undefined;
  readonly listeners: Set<(code: string) => void>;
}

const guards = new WeakMap<Stdio, Guard>();

function guardOf(stream: Stdio): Guard {
  const known = guards.get(stream);
  if (known !== undefined) return known;
  const guard: Guard = { closedBy: undefined, listeners: new Set() };
  guards.set(stream, guard);
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EAGAIN' || err.code === 'EBUSY' || guard.closedBy !== undefined) return;
    guard.closedBy = err.code ?? 'error';
    for (const listener of [...guard.listeners]) listener(guard.closedBy);
  });
  return guard;
}

/**
 * From the CLI's first line: every write to stdout or stderr anywhere in the process (including
 * modules that write to process.stdout directly) then fails quietly instead of crashing it.
 */
export function guardStdio(): void {
  guardOf(process.stdout);
  guardOf(process.stderr);
}

/** One line on stdout (or `stream`); nothing once the stream's reader has gone. */
export function printLine(line: string, stream: Stdio = process.stdout): void {
  if (guardOf(stream).closedBy !== undefined) return;
  stream.write(`${line}\n`);
}

/** The code that closed stdout (or `stream`), or undefined while it is writable. */
export function closedBy(stream: Stdio = process.stdout): string | undefined {
  return guardOf(stream).closedBy;
}

/**
 * `handler` once stdout (or `stream`) fails for good, with the error code (EPIPE); at once if it
 * already has. Returns the unsubscribe.
 */
export function onStdoutClosed(handler: (code: string) => void, stream: Stdio = process.stdout): () => void {
  const guard = guardOf(stream);
  let called = false;
  const once = (code: string): void => {
    if (called) return;
    called = true;
    guard.listeners.delete(once);
    handler(code);
  };
  if (guard.closedBy !== undefined) {
    queueMicrotask(() => once(guard.closedBy ?? 'error'));
  } else {
    guard.listeners.add(once);
  }
  return () => {
    called = true;
    guard.listeners.delete(once);
  };
}
