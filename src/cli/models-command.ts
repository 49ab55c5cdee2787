import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { ModelConfig } from '../contracts/model-config.ts';
import { backendInfo, openDevice } from '../device/index.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { loadChecked } from '../runtime/load-checked.ts';
import { scanRepository, type ArtifactKind } from '../runtime/model-repository.ts';
import { artifactFor } from './worker-deps.ts';

type Out = (line: string) => void;
const stdout: Out = (l) => process.stdout.write(`${l}\n`);

/**
 * The model file the workers of this host load, judged as the addon picks its ACL library
 * (native/src/acl_loader.cc) without loading it: NPU_FLEET_DEVICE=sim, else NPU_FLEET_ACL_LIB, else
 * CANN's ASCEND_HOME_PATH / ASCEND_TOOLKIT_HOME, else the bundled simulator. NPU_FLEET_DEVICE=ascend
 * says CANN outright.
 */
export function artifactFromEnv(env: NodeJS.ProcessEnv): ArtifactKind {
  if (env.NPU_FLEET_DEVICE === 'sim') return 'onnx';
  if (env.NPU_FLEET_DEVICE === 'ascend') return 'om';
  if (env.NPU_FLEET_ACL_LIB) return env.NPU_FLEET_ACL_LIB.includes('acl_sim') ? 'onnx' : 'om';
  return env.ASCEND_HOME_PATH || env.ASCEND_TOOLKIT_HOME ? 'om' : 'onnx';
}

/**
 * `npu-fleet models validate DIR`: exit 0 when every model is servable, else 1 with each problem.
 * Without --load the addon is not loaded, so the artifact kind is judged from the environment.
 */
export function validateModelsCommand(
  dir: string,
  out: Out = stdout,
  artifact: ArtifactKind = artifactFromEnv(process.env),
): number {
  // Here DIR is the argument, not the fleet config's modelRepository the scanner's message names.
  if (!existsSync(dir) || !statSync(dir).isDirectory()) {
    throw new FleetError('INVALID_ARGUMENT', `${dir} is not a directory: give the model repository (<dir>/<model>/config.yaml, <dir>/<model>/<version>/model.${artifact})`);
  }
  const snapshot = scanRepository(dir, { artifact });
  const problems = [...snapshot.problems];
  // The usual slip is to name one model's directory; its version directories then each read as a
  // model without a config.yaml, which does not say what to do.
  if (existsSync(join(snapshot.dir, 'config.yaml'))) {
    problems.unshift({ path: snapshot.dir, message: `holds a config.yaml, so it is a model directory, not a repository: run npu-fleet models validate ${dirname(snapshot.dir)}` });
  } else if (snapshot.models.size === 0 && problems.length === 0) {
    problems.push({ path: snapshot.dir, message: `no model directory in it (a repository holds <dir>/<model>/config.yaml and <dir>/<model>/<version>/model.${artifact})` });
  }
  for (const m of snapshot.models.values()) {
    // A model read with problems (a version without its model file, no servable version) is not ok.
    const modelDir = join(snapshot.dir, m.name);
    const own = problems.filter((p) => p.path === modelDir || p.path.startsWith(`${modelDir}/`)).length;
    const summary = `${m.name}: versions [${m.versions.map((v) => v.version).join(', ')}], serving [${m.served.map((v) => v.version).join(', ')}], ` +
      `gears ${JSON.stringify(m.config.batchGears ?? 'auto')}, ${m.config.priorityLevels} priority levels`;
    out(own === 0 ? `ok   ${summary}` : `bad  ${summary}: ${own} problem(s) below`);
  }
  for (const p of problems) out(`FAIL ${p.path}: ${p.message}`);
  out(`${snapshot.models.size} model(s), ${problems.length} problem(s) in ${snapshot.dir} (artifact: model.${artifact})`);
  return problems.length === 0 && snapshot.models.size > 0 ? 0 : 1;
}

/** The artifact the device found on this machine runs (loads the addon). */
export function loadedBackendArtifact(): ArtifactKind {
  return artifactFor(backendInfo().kind);
}

/** Why a version on disk is not served now, e.g. "versionPolicy latest 1" or "versionPolicy specific [2, 3]". */
function policyText(policy: ModelConfig['versionPolicy']): string {
  return policy.kind === 'latest' ? `versionPolicy latest ${policy.count}` : `versionPolicy specific [${policy.versions.join(', ')}]`;
}

/**
 * `npu-fleet models validate DIR --load`: loads every version on one device exactly as a worker
 * would (gears, buffer sizes) and checks its tensors against config.yaml, so a corrupt or
 * mismatched artifact is caught before a fleet picks it up. That includes the version directories
 * the versionPolicy does not serve today: one kept for rollback becomes served when the newest is
 * removed (or the policy changes), and if it then fails to load, running workers keep the removed
 * version (the rollback silently does not happen) and a worker starting up fails. They are
 * labelled and counted apart; a failure of either kind exits 1.
 */
export async function loadCheckModelsCommand(dir: string, deviceId: number, out: Out = stdout): Promise<number> {
  const { kind } = backendInfo();
  const artifact = artifactFor(kind);
  const snapshot = scanRepository(dir, { artifact });
  const device = await openDevice(deviceId);
  const served = { loaded: 0, failed: 0 };
  const unserved = { loaded: 0, failed: 0 };
  try {
    for (const m of snapshot.models.values()) {
      const servedNow = new Set(m.served.map((v) => v.version));
      for (const v of m.versions) {
        const isServed = servedNow.has(v.version);
        const count = isServed ? served : unserved;
        const label = isServed ? `${m.name}@${v.version}` : `${m.name}@${v.version} (not served under ${policyText(m.config.versionPolicy)})`;
        const startedAt = Date.now();
        try {
          const model = await loadChecked(device, v.artifactPath, m.config, `${m.name} version ${v.version}`);
          await model.unload();
          count.loaded++;
          out(`ok   ${label}: loads on ${kind} device ${deviceId} in ${Date.now() - startedAt} ms; its tensors match config.yaml`);
        } catch (err) {
          count.failed++;
          const rollback = isServed ? '' : "; serving it (a rollback, a versionPolicy change) would fail: fix it, or move its directory out or hide it with a leading '.'";
          out(`FAIL ${label}: ${(err as Error).message}${rollback}`);
        }
      }
    }
  } finally {
    await device.close();
  }
  const unservedCount = unserved.loaded + unserved.failed;
  const counts =
    unservedCount === 0
      ? `${served.loaded} version(s) loaded, ${served.failed} failed`
      : `${served.loaded} served version(s) loaded, ${served.failed} failed; ${unservedCount} not served now: ${unserved.loaded} loaded, ${unserved.failed} failed`;
  out(`${counts} (artifact: model.${artifact}, ${kind} device ${deviceId})`);
  return served.failed === 0 && unserved.failed === 0 && served.loaded > 0 ? 0 : 1;
}
