import { existsSync, statSync } from 'node:fs';
import { FleetError } from '../errors/fleet-error.ts';
import { scanRepository } from '../runtime/model-repository.ts';

/** `npu-fleet models validate DIR`: exit 0 when every model is servable, else 1 with each problem. */
export function validateModelsCommand(dir: string, out: (line: string) => void = (l) => process.stdout.write(`${l}\n`)): number {
  const artifact = process.env.NPU_FLEET_DEVICE === 'ascend' ? 'om' : 'onnx';
  // Here DIR is the argument, not the fleet config's modelRepository the scanner's message names.
  if (!existsSync(dir) || !statSync(dir).isDirectory()) {
    throw new FleetError('INVALID_ARGUMENT', `${dir} is not a directory: give the model repository (<dir>/<model>/config.yaml, <dir>/<model>/<version>/model.${artifact})`);
  }
  const snapshot = scanRepository(dir, { artifact });
  for (const m of snapshot.models.values()) {
    out(`ok   ${m.name}: versions [${m.versions.map((v) => v.version).join(', ')}], serving [${m.served.map((v) => v.version).join(', ')}], ` +
      `gears ${JSON.stringify(m.config.batchGears ?? 'auto')}, ${m.config.priorityLevels} priority levels`);
  }
  for (const p of snapshot.problems) out(`FAIL ${p.path}: ${p.message}`);
  out(`${snapshot.models.size} model(s), ${snapshot.problems.length} problem(s) in ${snapshot.dir} (artifact: model.${artifact})`);
  return snapshot.problems.length === 0 && snapshot.models.size > 0 ? 0 : 1;
}
