// Thin entry point: scoring a data set, `npu-fleet publish --file DATA.jsonl --await --out RESULTS.jsonl`
// (give those flags; --resume continues a run). Logic in src/cli/publish-command.ts and src/producer/bulk-publish.ts.
import { main } from '../src/cli/main.ts';

process.exitCode = await main(['publish', '--await', ...process.argv.slice(2)]);
