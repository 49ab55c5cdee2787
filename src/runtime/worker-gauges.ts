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
 * memory in use and source lag, of the models it serves now. A device or broker that cannot answer
 * leaves its gauge as it was.
 *
 * Three hooks, registered apart: a scrape does not start a hook whose previous run is still going,
 * so a source-lag read hanging in a broker outage (BullMQ retries forever) would otherwise freeze
 * the local queue gauges too, exactly when they matter.
 */
export function workerGaugeHooks<P>(lanes: ModelLanes<P>, o: GaugeSources): Array<() => void | Promise<void>> {
  return [() => exportLocalQueues(lanes, o.metrics), () => exportDeviceMemory(o), () => exportSourceLag(lanes, o)];
}

/** All of a worker's gauges at once (tests, and callers that read them outside a scrape). */
export async function exportWorkerGauges<P>(lanes: ModelLanes<P>, o: GaugeSources): Promise<void> {
  await Promise.all(workerGaugeHooks(lanes, o).map((hook) => hook()));
}

function exportLocalQueues<P>(lanes: ModelLanes<P>, metrics: FleetMetrics): void {
  const nowMs = Date.now();
  // A model has several lanes (requests that pin a version queue apart): its gauges are their sums.
  // An unloaded model has no lanes left, so it leaves the gauges.
  const queues = new Map<string, { depthByPriority: Map<number, number>; bytes: number }>();
  for (const lane of lanes.allLanes()) {
    const name = lane.config.name;
    const stats = lane.scheduler.stats(nowMs);
    let q = queues.get(name);
    if (q === undefined) queues.set(name, (q = { depthByPriority: new Map(), bytes: 0 }));
    for (const level of stats.levels) q.depthByPriority.set(level.level, (q.depthByPriority.get(level.level) ?? 0) + level.requests);
    q.bytes += stats.queuedBytes;
  }
  metrics.setLocalQueues(queues);
}

async function exportDeviceMemory(o: GaugeSources): Promise<void> {
  try {
    const mem = await o.device.memInfo();
    o.metrics.setDeviceMemoryUsed(o.deviceId, mem.totalBytes - mem.freeBytes);
  } catch (err) {
    o.log.debug({ err }, 'device memory unavailable');
  }
}

async function exportSourceLag<P>(lanes: ModelLanes<P>, o: GaugeSources): Promise<void> {
  try {
    const lag = await o.transport.sourceLag();
    // The transport stays subscribed to a model removed from the repository (its requests are
    // refused): the gauges list the models this worker serves.
    o.metrics.setSourceLag(o.transport.kind, Object.fromEntries(Object.entries(lag).filter(([model]) => lanes.serves(model))));
  } catch (err) {
    o.log.debug({ err }, 'source lag unavailable');
  }
}
