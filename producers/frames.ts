// Thin entry point: `npu-fleet frames`. Logic in src/cli/load-command.ts and src/producer/open-loop.ts.
import { main } from '../src/cli/main.ts';

process.exitCode = await main(['frames', ...process.argv.slice(2)]);
