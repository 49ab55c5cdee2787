#!/usr/bin/env node
// Thin launcher: registers the TypeScript loader, then hands over to the CLI in src/.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli/main.ts');
const code = await main(process.argv.slice(2));
// Commands return only when their work is done: exit now rather than wait for a client library's
// idle timers or sockets to let the event loop drain.
process.exit(code);
