import type { BacklogReading, FleetMetrics } from '../observability/metrics.ts';
import type { Logger } from '../observability/logger.ts';
import type { FullBatchCost } from '../scheduler/scheduler-types.ts';
import type { Transport } from '../transport/transport.ts';
import type { DeviceLike } from './load-checked.ts';
import type { Lane, ModelLanes } from './model-lanes.ts';

export interface GaugeSources {
  readonly deviceId: number;
  readonly device: DeviceLike;
  readonly transport: Transport;
  readonly metrics: FleetMetrics;
  readonly log: Logger;
  /** The clock queue ages are read against (epoch ms, as requests' arrivedAt); default Date.now. */
  readonly nowMs?: (() => number) | undefined;
}

/** The parts of a lane the backlog reading uses. */
interface GaugedLane {
  readonly config: { readonly name: string };
  readonly pinned: string | undefined;
  readonly scheduler: Pick<Lane<unknown>['scheduler'], 'queuedItems' | 'fullBatchCost'>;
}

/**
 * A worker's gauges, read on each scrape: queue depth per model and priority, queued bytes, the
 * oldest queued request's age, device memory in use, source lag, and the backlog in device seconds,
 * of the models it serves now. A device or broker that cannot answer leaves its gauge as it was.
 *
 * Three hooks, registered apart: a scrape does not start a hook whose previous run is still going,
 * so a source-lag read hanging in a broker outage (BullMQ retries forever) would otherwise freeze
 * the local queue gauges too, exactly when they matter. The backlog gauges are set by both the
 * local-queue hook (with the last lag read) and the source-lag hook (with the lag it just read).
 */
export function workerGaugeHooks<P>(lanes: ModelLanes<P>, o: GaugeSources): Array<() => void | Promise<void>> {
  const lag: LastLag = { byModel: undefined };
  return [() => exportLocalQueues(lanes, o, lag), () => exportDeviceMemory(o), () => exportSourceLag(lanes, o, lag)];
}

/** All of a worker's gauges at once (tests, and callers that read them outside a scrape). */
export async function exportWorkerGauges<P>(lanes: ModelLanes<P>, o: GaugeSources): Promise<void> {
  await Promise.all(workerGaugeHooks(lanes, o).map((hook) => hook()));
}

/** The source lag of the served models as last read; undefined before a read succeeded. */
interface LastLag {
  byModel: Readonly<Record<string, number>> | undefined;
}

function exportLocalQueues<P>(lanes: ModelLanes<P>, o: GaugeSources, lag: LastLag): void {
  const nowMs = (o.nowMs ?? Date.now)();
  // A model has several lanes (requests that pin a version queue apart): its gauges are their sums
  // (the oldest request's age: their oldest).
  // An unloaded model has no lanes left, so it leaves the gauges.
  const queues = new Map<string, { depthByPriority: Map<number, number>; bytes: number; oldestAgeSecondsByPriority: Map<number, number> }>();
  for (const lane of lanes.allLanes()) {
    const name = lane.config.name;
    const stats = lane.scheduler.stats(nowMs);
    let q = queues.get(name);
    if (q === undefined) queues.set(name, (q = { depthByPriority: new Map(), bytes: 0, oldestAgeSecondsByPriority: new Map() }));
    for (const level of stats.levels) {
      q.depthByPriority.set(level.level, (q.depthByPriority.get(level.level) ?? 0) + level.requests);
      if (level.requests > 0) q.oldestAgeSecondsByPriority.set(level.level, Math.max(q.oldestAgeSecondsByPriority.get(level.level) ?? 0, level.oldestAgeMs / 1000));
    }
    q.bytes += stats.queuedBytes;
  }
  // A model gets its first lane with its first request: until then (a worker just started or
  // restarted) it is served with nothing queued, 0 on every level, not absent.
  for (const { model, priorityLevels } of lanes.subscriptions()) {
    if (queues.has(model)) continue;
    queues.set(model, { depthByPriority: new Map(Array.from({ length: priorityLevels }, (_, level) => [level, 0])), bytes: 0, oldestAgeSecondsByPriority: new Map() });
  }
  o.metrics.setLocalQueues(queues);
  o.metrics.setBacklog(backlogReadings(lanes.allLanes(), lag.byModel, lagHoldsLocal(o.transport)));
  o.metrics.setVersionsServed(lanes.servedVersions());
}

async function exportDeviceMemory(o: GaugeSources): Promise<void> {
  try {
    const mem = await o.device.memInfo();
    o.metrics.setDeviceMemoryUsed(o.deviceId, mem.totalBytes - mem.freeBytes);
  } catch (err) {
    o.log.debug({ err }, 'device memory unavailable');
  }
}

async function exportSourceLag<P>(lanes: ModelLanes<P>, o: GaugeSources, last: LastLag): Promise<void> {
  let lag: Record<string, number>;
  try {
    lag = await o.transport.sourceLag();
  } catch (err) {
    o.log.debug({ err }, 'source lag unavailable');
    return;
  }
  // The transport stays subscribed to a model removed from the repository (its requests are
  // refused): the gauges list the models this worker serves.
  last.byModel = Object.fromEntries(Object.entries(lag).filter(([model]) => lanes.serves(model)));
  o.metrics.setSourceLag(o.transport.kind, last.byModel);
  o.metrics.setBacklog(backlogReadings(lanes.allLanes(), last.byModel, lagHoldsLocal(o.transport)));
}

/**
 * Kafka's lag runs from the group's committed offsets, and a request is committed once settled: what
 * this worker fetched and holds is in the lag. BullMQ's waiting jobs leave out the jobs a worker took.
 */
const lagHoldsLocal = (transport: Pick<Transport, 'kind'>): boolean => transport.kind === 'kafka';

/**
 * Each model's backlog in device seconds, from the lanes' learnt costs at full batches. The local
 * part is exact per lane: its queued items at its own cost (a lane that has not measured a batch
 * yet, e.g. a newly pinned version, at the model's). The broker's requests have no lane yet: they
 * are charged the model's cost per request, that of the default lane, which unpinned requests
 * join (the costliest measured lane when the default lane has none). A model none of whose lanes
 * has measured a batch has no reading: its gauges are absent, not 0.
 */
export function backlogReadings(lanes: readonly GaugedLane[], lag: Readonly<Record<string, number>> | undefined, sourceLagHoldsLocal = false): Map<string, BacklogReading> {
  const byModel = new Map<string, Array<{ items: number; cost: FullBatchCost | undefined; pinned: boolean }>>();
  for (const lane of lanes) {
    const name = lane.config.name;
    let list = byModel.get(name);
    if (list === undefined) byModel.set(name, (list = []));
    list.push({ items: lane.scheduler.queuedItems, cost: lane.scheduler.fullBatchCost(), pinned: lane.pinned !== undefined });
  }
  const out = new Map<string, BacklogReading>();
  for (const [model, list] of byModel) {
    const perRequestMs = (c: FullBatchCost): number => c.deviceMsPerItem * c.itemsPerRequest;
    let chosen = list.find((l) => !l.pinned && l.cost !== undefined)?.cost;
    if (chosen === undefined) {
      for (const l of list) if (l.cost !== undefined && (chosen === undefined || perRequestMs(l.cost) > perRequestMs(chosen))) chosen = l.cost;
    }
    if (chosen === undefined) continue;
    let localMs = 0;
    for (const l of list) localMs += l.items * (l.cost ?? chosen).deviceMsPerItem;
    out.set(model, { deviceSecondsPerRequest: perRequestMs(chosen) / 1000, localSeconds: localMs / 1000, sourceLag: lag?.[model], sourceLagHoldsLocal });
  }
  return out;
}
