#!/usr/bin/env node
// Thin launcher: registers the TypeScript loader, then hands over to the CLI in src/.

// Stop signals are caught from the first line: as PID 1 (a container) a signal without a handler
// is ignored, and loading the loader and the CLI takes a second or more (the embedded fleet's
// start-up longer), so a SIGTERM then was lost and the container waited out its grace period.
// Remembered here; the command's own handlers take it over (src/cli/early-signals.ts).
const early = { signal: undefined, handler: (signal) => void (early.signal ??= signal) };
for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP']) process.on(signal, early.handler);
globalThis[Symbol.for('npu-fleet.early-signals')] = early;

const { register } = await import('tsx/esm/api');
register();
const { main } = await import('../src/cli/main.ts');
const code = await main(process.argv.slice(2));
// Commands return only when their work is done: exit now rather than wait for a client library's
// idle timers or sockets to let the event loop drain.
process.exit(code);
