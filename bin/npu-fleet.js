#!/usr/bin/env node
// Thin launcher: registers the TypeScript loader, then hands over to the CLI in src/.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli/main.ts');
process.exitCode = await main(process.argv.slice(2));
