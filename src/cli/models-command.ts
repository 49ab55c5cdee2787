import { existsSync, statSync } from 'node:fs';
import { backendInfo, openDevice } from '../device/index.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { loadChecked } from '../runtime/model-lanes.ts';
import { scanRepository, type ArtifactKind } from '../runtime/model-repository.ts';
import { artifactFor } from './worker-deps.ts';

type Out = (line: string) => void;
const stdout: Out = (l) => process.stdout.write(`${l}\n`);

/**
 * `npu-fleet models validate DIR`: exit 0 when every model is servable, else 1 with each problem.
 * Without --load the addon is not loaded, so the artifact kind comes from NPU_FLEET_DEVICE.
 */
export function validateModelsCommand(
  dir: string,
  out: Out = stdout,
  artifact: ArtifactKind = artifactFor(process.env.NPU_FLEET_DEVICE === 'ascend' ? 'ascend' : 'sim'),
): number {
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

/** The artifact the device found on this machine runs (loads the addon). */
export function loadedBackendArtifact(): ArtifactKind {
  return artifactFor(backendInfo().kind);
}

/**
 * `npu-fleet models validate DIR --load`: loads every served version on one device exactly as a
 * worker would (gears, buffer sizes) and checks its tensors against config.yaml, so a corrupt or
 * mismatched artifact is caught before a fleet picks it up. Exit 0 when all load, else 1.
 */
export async function loadCheckModelsCommand(dir: string, deviceId: number, out: Out = stdout): Promise<number> {
  const { kind } = backendInfo();
  const artifact = artifactFor(kind);
  const snapshot = scanRepository(dir, { artifact });
  const device = await openDevice(deviceId);
  let loaded = 0;
  let failed = 0;
  try {
    for (const m of snapshot.models.values()) {
      for (const v of m.served) {
        const startedAt = Date.now();
        try {
          const model = await loadChecked(device, v.artifactPath, m.config, `${m.name} version ${v.version}`);
          await model.unload();
          loaded++;
          out(`ok   ${m.name}@${v.version}: loads on ${kind} device ${deviceId} in ${Date.now() - startedAt} ms; its tensors match config.yaml`);
        } catch (err) {
          failed++;
          out(`FAIL ${m.name}@${v.version}: ${(err as Error).message}`);
        }
      }
    }
  } finally {
    await device.close();
  }
  out(`${loaded} version(s) loaded, ${failed} failed (artifact: model.${artifact}, ${kind} device ${deviceId})`);
  return failed === 0 && loaded > 0 ? 0 : 1;
}
