// Thin entry point: one device worker (`npu-fleet worker --device N`). Logic lives in src/runtime.
import { main } from '../src/cli/main.ts';

process.exitCode = await main(['worker', ...process.argv.slice(2)]);
