// Thin entry point: `npu-fleet publish` (synthetic or file requests, optional await). Logic in src/cli.
import { main } from '../src/cli/main.ts';

process.exitCode = await main(['publish', ...process.argv.slice(2)]);
