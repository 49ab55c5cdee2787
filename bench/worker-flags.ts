/**
 * Benches that host device workers in their own process run with the flags `npu-fleet start`
 * gives worker processes (src/runtime/worker-node-flags.ts): re-executes this script with them
 * when they are missing. Call it first thing: the re-executed process does the work (in this one
 * only the static imports have been evaluated).
 */
import { spawnSync } from 'node:child_process';
import { FleetConfigSchema } from '../src/contracts/fleet-config.ts';
import { workerNodeFlags } from '../src/runtime/worker-node-flags.ts';

export function runWithWorkerFlags(): void {
  const flags = workerNodeFlags(FleetConfigSchema.parse({}).worker);
  const missing = flags.filter((f) => !process.execArgv.includes(f));
  if (missing.length === 0 || process.env['NPU_FLEET_BENCH_NO_FLAGS']) return;
  const script = process.argv[1] as string;
  const r = spawnSync(process.execPath, [...missing, ...process.execArgv, script, ...process.argv.slice(2)], { stdio: 'inherit' });
  process.exit(r.status ?? 1);
}
