import type { FleetConfig } from '../contracts/fleet-config.ts';
import { backendInfo, openDevice } from '../device/index.ts';
import type { Logger } from '../observability/logger.ts';
import type { WorkerDeps } from '../runtime/worker-process.ts';
import { createTransport } from '../transport/index.ts';

/** Production wiring: the native binding and the configured broker. */
export function workerDeps(config: FleetConfig): WorkerDeps {
  if (config.devices.backend === 'sim') process.env.NPU_FLEET_DEVICE = 'sim';
  const info = backendInfo();
  if (config.devices.backend === 'ascend' && info.kind !== 'ascend') {
    throw new Error(`devices.backend is "ascend" but the ACL library found is ${info.libraryPath}; install CANN or set NPU_FLEET_ACL_LIB`);
  }
  return {
    openDevice: (id) => openDevice(id),
    artifact: info.kind === 'ascend' ? 'om' : 'onnx',
    createTransport: (cfg: FleetConfig, log: Logger) => createTransport(cfg.transport, { log, limits: cfg.limits }),
  };
}
