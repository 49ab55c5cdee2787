// Thin entry point: the fleet supervisor (`npu-fleet start`). Logic lives in src/runtime.
import { main } from '../src/cli/main.ts';

process.exitCode = await main(['start', ...process.argv.slice(2)]);
