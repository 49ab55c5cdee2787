import type { FleetMetrics } from '../observability/metrics.ts';
import type { Logger } from '../observability/logger.ts';
import type { Transport } from '../transport/transport.ts';
import type { DeviceLike, ModelLanes } from './model-lanes.ts';

export interface GaugeSources {
  readonly deviceId: number;
  readonly device: DeviceLike;
  readonly transport: Transport;
  readonly metrics: FleetMetrics;
  readonly log: Logger;
}

/**
 * A worker's gauges, read on each scrape: queue depth per model and priority, queued bytes, device
 * memory in use and source lag. A device or broker that cannot answer leaves its gauge as it was.
 */
export async function exportWorkerGauges<P>(lanes: ModelLanes<P>, o: GaugeSources): Promise<void> {
  const nowMs = Date.now();
  const bytes = new Map<string, number>();
  // A model has several lanes (requests that pin a version queue apart): its gauges are their sums.
  const depth = new Map<string, Map<number, number>>();
  for (const lane of lanes.allLanes()) {
    const name = lane.config.name;
    const stats = lane.scheduler.stats(nowMs);
    let levels = depth.get(name);
    if (levels === undefined) depth.set(name, (levels = new Map()));
    for (const level of stats.levels) levels.set(level.level, (levels.get(level.level) ?? 0) + level.requests);
    bytes.set(name, (bytes.get(name) ?? 0) + stats.queuedBytes);
  }
  for (const [model, levels] of depth) for (const [level, n] of levels) o.metrics.setQueueDepth(model, level, n);
  for (const [model, n] of bytes) o.metrics.setQueueBytes(model, n);
  try {
    const mem = await o.device.memInfo();
    o.metrics.setDeviceMemoryUsed(o.deviceId, mem.totalBytes - mem.freeBytes);
  } catch (err) {
    o.log.debug({ err }, 'device memory unavailable');
  }
  try {
    const lag = await o.transport.sourceLag();
    for (const [model, n] of Object.entries(lag)) o.metrics.setSourceLag(model, o.transport.kind, n);
  } catch (err) {
    o.log.debug({ err }, 'source lag unavailable');
  }
}
