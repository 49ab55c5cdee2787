import type { FleetConfig } from '../contracts/fleet-config.ts';
import { backendInfo, openDevice } from '../device/index.ts';
import { FleetError } from '../errors/fleet-error.ts';
import type { Logger } from '../observability/logger.ts';
import type { ArtifactKind } from '../runtime/model-repository.ts';
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

/** The configured transport with its tuning knobs applied (also used by benches). */
export function transportFor(cfg: FleetConfig, log: Logger): Transport {
  return createTransport(cfg.transport, {
    log,
    limits: cfg.limits,
    ...(cfg.transport.kind === 'kafka'
      ? {
          kafka: {
            maxBytesPerPartition: cfg.transport.kafka.maxBytesPerPartition,
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
