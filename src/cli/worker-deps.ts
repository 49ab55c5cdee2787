import { readdir, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { FRAME_PREFIX_BYTES } from '../codec/frame.ts';
import { settingFix } from '../contracts/config-loader.ts';
import type { FleetConfig } from '../contracts/fleet-config.ts';
import type { CodecLimits } from '../contracts/limits.ts';
import { effectiveGears, type ModelConfig } from '../contracts/model-config.ts';
import { DTYPE_BYTES } from '../contracts/tensor.ts';
import { backendInfo, openDevice } from '../device/index.ts';
import { FleetError } from '../errors/fleet-error.ts';
import type { Logger } from '../observability/logger.ts';
import { scanRepository, type ArtifactKind } from '../runtime/model-repository.ts';
import type { WorkerDeps } from '../runtime/worker-process.ts';
import { createTransport, type Transport } from '../transport/index.ts';

/** The artifact a backend runs: model.om on a real NPU, model.onnx on the simulator. */
export function artifactFor(kind: 'sim' | 'ascend'): ArtifactKind {
  return kind === 'ascend' ? 'om' : 'onnx';
}

/** Production wiring: the native binding and the configured broker. */
export function workerDeps(config: FleetConfig): WorkerDeps {
  if (config.devices.backend === 'sim') process.env.NPU_FLEET_DEVICE = 'sim';
  const info = backendInfo();
  if (config.devices.backend === 'ascend' && info.kind !== 'ascend') {
    throw new FleetError('INVALID_CONFIG', `devices.backend is "ascend" but the ACL library found is ${info.libraryPath}; install CANN or set NPU_FLEET_ACL_LIB (or set devices.backend to auto or sim)`, {
      details: { field: 'devices.backend', libraryPath: info.libraryPath },
    });
  }
  return {
    openDevice: (id) => openDevice(id),
    artifact: artifactFor(info.kind),
    createTransport: transportFor,
  };
}

/**
 * `npu-fleet start`: the backend has a device for every worker devices.count asks for. A worker for
 * a device it lacks exits 2 (unknown device) at every start, and its supervisor would restart it
 * for good while the fleet looks up; this refuses the fleet before any worker starts.
 */
export function checkDeviceCount(config: FleetConfig): void {
  workerDeps(config);
  const { kind, deviceCount, libraryPath } = backendInfo();
  if (config.devices.count <= deviceCount) return;
  throw new FleetError(
    'INVALID_CONFIG',
    `devices.count ${config.devices.count} (--devices) but the ${kind} backend (${libraryPath}) has ${deviceCount} device(s): lower devices.count` +
      (kind === 'sim' ? ', or set NPU_FLEET_SIM_DEVICES to simulate more' : ''),
    { details: { field: 'devices.count', count: config.devices.count, deviceCount, libraryPath } },
  );
}

/** How long `start` waits for the model repository's answers: past it the workers' own bounded start-up reports it. */
const REPOSITORY_CHECK_MS = 5_000;

/** Models of the repository a refusal lists: the names it shows, not the whole of a large repository. */
const HELD_LISTED = 10;

/** The file reads the repository check makes (a test gives ones that never answer). */
export interface RepositoryCheckFs {
  readonly stat: (path: string) => Promise<{ isDirectory(): boolean }>;
  readonly readdir: (path: string) => Promise<string[]>;
}

const NODE_FS: RepositoryCheckFs = { stat, readdir: (path) => readdir(path) };

/**
 * `npu-fleet start`: the model repository is a directory holding every model `models` names
 * (<name>/config.yaml, as the worker checks). Each worker exits 2 at start on either, and the
 * supervisor restarted them for good while the fleet looked up (models: [mlp-clasifier], a typo:
 * 5 restarts in 25 s); this refuses the fleet before any worker starts, as the embedded fleet does.
 * Stricter than a lone `npu-fleet worker`, which serves the models it finds when only some are
 * absent: a typo typed at start is better fixed than found later in a warning. A repository that
 * does not answer (a hung mount) is left to the workers, whose start-up worker.startTimeoutMs bounds.
 */
export async function checkModelRepository(config: FleetConfig, boundMs = REPOSITORY_CHECK_MS, fs: RepositoryCheckFs = NODE_FS): Promise<void> {
  await bounded(repositoryRefusal(config, fs), boundMs);
}

/**
 * A lone `npu-fleet worker`: only that the model repository is a directory (it serves the models
 * it finds), refused naming where modelRepository came from, as checkModelRepository does.
 */
export async function checkModelRepositoryDirectory(config: FleetConfig, boundMs = REPOSITORY_CHECK_MS, fs: Pick<RepositoryCheckFs, 'stat'> = NODE_FS): Promise<void> {
  await bounded(repositoryDirRefusal(config, fs), boundMs);
}

/** Throws the refusal if it comes within boundMs; a check that does not answer is left to the worker's start bound. */
async function bounded(check: Promise<FleetError | undefined>, boundMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const refusal = await Promise.race([
    check,
    new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), boundMs))),
  ]);
  clearTimeout(timer);
  if (refusal !== undefined) throw refusal;
}

/**
 * modelRepository when it names no directory, with the fix where the value came from: the
 * variable when NPU_FLEET__MODEL_REPOSITORY set it (the file does not hold it), else the file.
 */
export async function repositoryDirRefusal(config: FleetConfig, fs: Pick<RepositoryCheckFs, 'stat'> = NODE_FS): Promise<FleetError | undefined> {
  const dir = resolve(config.modelRepository);
  const why = await fs.stat(dir).then(
    (s) => (s.isDirectory() ? undefined : ''),
    (err: NodeJS.ErrnoException) => ` (${err.code ?? err.message})`,
  );
  if (why === undefined) return undefined;
  return new FleetError('INVALID_CONFIG', `model repository ${dir} is not a directory${why}; ${settingFix(config, ['modelRepository'])}`, {
    details: { field: 'modelRepository', dir },
  });
}

async function repositoryRefusal(config: FleetConfig, fs: RepositoryCheckFs): Promise<FleetError | undefined> {
  const notDir = await repositoryDirRefusal(config, fs);
  if (notDir !== undefined) return notDir;
  const dir = resolve(config.modelRepository);
  const wanted = config.models ?? [];
  const hasConfig = (name: string): Promise<boolean> => fs.stat(join(dir, name, 'config.yaml')).then(() => true, () => false);
  const present = await Promise.all(wanted.map(hasConfig));
  const absent = wanted.filter((_, i) => !present[i]);
  if (absent.length === 0) return undefined;
  const entries = await fs.readdir(dir).catch(() => [] as string[]);
  const held = (await Promise.all(entries.map(async (name) => ((await hasConfig(name)) ? name : undefined))))
    .filter((name): name is string => name !== undefined)
    .sort();
  const listed =
    held.length === 0
      ? 'no model (no <name>/config.yaml)'
      : held.slice(0, HELD_LISTED).join(', ') + (held.length > HELD_LISTED ? ` and ${held.length - HELD_LISTED} more` : '');
  return new FleetError(
    'INVALID_CONFIG',
    `models lists ${absent.join(', ')}, which the model repository ${dir} does not hold (no ${absent.map((n) => `${n}/config.yaml`).join(', ')}); ` +
      `it holds ${listed}: fix the name in models (NPU_FLEET__MODELS), deploy the model, or drop it from the list`,
    { details: { field: 'models', absent, dir, held: held.slice(0, HELD_LISTED) } },
  );
}

/** The configured transport with its tuning knobs applied (also used by benches). */
export function transportFor(cfg: FleetConfig, log: Logger): Transport {
  return createTransport(cfg.transport, {
    log,
    limits: cfg.limits,
    ...(cfg.transport.kind === 'kafka'
      ? {
          kafka: {
            maxBytesPerPartition: cfg.transport.kafka.maxBytesPerPartition,
            largestRequestBytes: largestRequestBytes(modelConfigs(cfg), cfg.limits),
            lowPriorityInflightPerPartition: cfg.transport.kafka.lowPriorityInflightPerPartition,
          },
        }
      : {}),
    ...(cfg.transport.kind === 'bullmq'
      ? {
          bullmq: {
            prefetch: cfg.transport.bullmq.prefetch,
            // Each device hang is a stall of the jobs the worker held: BullMQ must not fail a job
            // for stalling (with no result) before the fleet quarantines it with one.
            maxStalledCount: Math.max(5, cfg.worker.maxHangsPerRequest + 3),
          },
        }
      : {}),
  });
}

/** The configs of the models the worker serves (the artifact does not matter here); none when the repository cannot be read, which the worker's own scan reports. */
function modelConfigs(cfg: FleetConfig): ModelConfig[] {
  try {
    return [...scanRepository(cfg.modelRepository, { artifact: 'onnx', only: cfg.models }).models.values()].map((m) => m.config);
  } catch {
    return [];
  }
}

/**
 * The largest request the models allow, in its larger wire form (JSON, base64 data; a binary frame
 * is smaller): the largest batch gear of samples of every input, a bucketed axis at its largest
 * bound (request validation refuses anything larger), plus the most header the codec takes;
 * limits.maxMessageBytes bounds it. The Kafka transport raises its fetch size to hold it.
 */
export function largestRequestBytes(models: readonly ModelConfig[], limits: CodecLimits): number | undefined {
  let largest: number | undefined;
  for (const config of models) {
    const gears = effectiveGears(config);
    const items = gears[gears.length - 1] ?? config.maxBatchSize;
    let bytes = FRAME_PREFIX_BYTES + limits.maxHeaderBytes;
    for (const input of config.inputs) {
      const perItem = input.dims.reduce((n, d, axis) => {
        if (axis === 0) return n;
        const bound = config.buckets?.input === input.name && config.buckets.axis === axis ? config.buckets.bounds[config.buckets.bounds.length - 1] : d;
        return n * Math.max(0, bound ?? 0);
      }, DTYPE_BYTES[input.dtype]);
      // base64: 4 characters for every 3 bytes, padded; 8 more for a binary frame's alignment.
      bytes += 4 * Math.ceil((items * perItem) / 3) + 8;
    }
    largest = Math.max(largest ?? 0, Math.min(bytes, limits.maxMessageBytes));
  }
  return largest;
}
