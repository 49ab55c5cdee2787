import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/observability/logger.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';
import type { DeviceLike } from '../../../src/runtime/load-checked.ts';
import type { ModelLanes } from '../../../src/runtime/model-lanes.ts';
import { backlogReadings, exportWorkerGauges, workerGaugeHooks } from '../../../src/runtime/worker-gauges.ts';
import { BatchScheduler, type FullBatchCost, type SchedulerOptionsInput } from '../../../src/scheduler/index.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import type { Transport } from '../../../src/transport/transport.ts';
import { MODEL, request, sample, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

/** A model's lane as the gauges read it: its name, the requests (one item each) queued per priority level, its cost. */
const lane = (name: string, perLevel: readonly number[], queuedBytes: number, cost?: FullBatchCost) => ({
  config: { name },
  pinned: undefined,
  scheduler: {
    stats: () => ({ queuedBytes, levels: perLevel.map((requests, level) => ({ level, requests, oldestAgeMs: 0 })) }),
    queuedItems: perLevel.reduce((a, b) => a + b, 0),
    fullBatchCost: () => cost,
  },
});

/** A lane on a real scheduler, as ModelLanes makes them. */
const schedulerLane = (name: string, options: SchedulerOptionsInput = {}, pinned?: string) => ({
  config: { name },
  pinned,
  scheduler: new BatchScheduler<string>({ gears: [1, 8, 32], maxBatchSize: 32, ...options }),
});
type SchedulerLane = ReturnType<typeof schedulerLane>;
const enqueue = (l: SchedulerLane, id: string, o: { items?: number; priority?: number; at?: number } = {}) =>
  expect(l.scheduler.enqueue({ id, items: o.items ?? 1, priority: o.priority ?? 0, arrivedAt: o.at ?? 0, payload: id }).kind).toBe('accepted');
const lanesOf = (list: () => readonly SchedulerLane[]) =>
  ({ allLanes: list, serves: (model: string) => list().some((l) => l.config.name === model), servedVersions: () => [], subscriptions: () => [] }) as unknown as ModelLanes<unknown>;
const idleDevice: DeviceLike = { id: 0, loadModel: () => Promise.reject(new Error('not used')), memInfo: () => Promise.resolve({ freeBytes: 1, totalBytes: 2 }), close: () => Promise.resolve() };

/** One gauge of a scrape, undefined when the series is absent. */
function gaugeIn(text: string, name: string, labels: string): number | undefined {
  const m = new RegExp(`^${name}\\{${labels}\\} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : undefined;
}

describe('exportWorkerGauges', () => {
  it('sums queue depth over a model\'s lanes (requests pinning a version queue in a lane of their own)', async () => {
    const metrics = new FleetMetrics({ processMetrics: false });
    // The default lane, and the lane of requests that pinned version 1 (fewer of them, read last).
    const lanes = { allLanes: () => [lane('mlp', [5, 40], 4000), lane('mlp', [0, 2], 200), lane('cnn', [1], 10)], serves: () => true, servedVersions: () => [], subscriptions: () => [] } as unknown as ModelLanes<unknown>;
    const device: DeviceLike = { id: 0, loadModel: () => Promise.reject(new Error('not used')), memInfo: () => Promise.resolve({ freeBytes: 1, totalBytes: 2 }), close: () => Promise.resolve() };
    const transport = new MemoryTransport({ broker: new MemoryBroker() });
    await exportWorkerGauges(lanes, { deviceId: 0, device, transport, metrics, log: createLogger({ level: 'silent' }) });
    const text = await metrics.render();
    const gauge = (name: string, labels: string): number | undefined => {
      const m = new RegExp(`^${name}\\{${labels}\\} (\\S+)$`, 'm').exec(text);
      return m ? Number(m[1]) : undefined;
    };
    expect(gauge('npu_fleet_local_queue_depth', 'model="mlp",priority="0"')).toBe(5);
    expect(gauge('npu_fleet_local_queue_depth', 'model="mlp",priority="1"')).toBe(42);
    expect(gauge('npu_fleet_local_queue_depth', 'model="cnn",priority="0"')).toBe(1);
    expect(gauge('npu_fleet_local_queue_bytes', 'model="mlp"')).toBe(4200);
    await transport.close();
  });
});

describe('backlog and queue age gauges', () => {
  const log = createLogger({ level: 'silent' });

  it('backlog seconds = (broker lag + local queue) x a full batch\'s learnt device time per request: 4 ms at gear 32, 100 queued + 900 lag → 0.125 s', async () => {
    const metrics = new FleetMetrics({ processMetrics: false });
    const mlp = schedulerLane('mlp');
    const transport = new MemoryTransport({ broker: new MemoryBroker() });
    let lag = 900;
    transport.sourceLag = () => Promise.resolve({ mlp: lag });
    const o = { deviceId: 0, device: idleDevice, transport, metrics, log, nowMs: () => 1_000 };
    for (let i = 0; i < 100; i++) enqueue(mlp, `r${i}`);
    // Nothing measured yet: the prior is a guess, so the backlog gauges are absent (not 0).
    await exportWorkerGauges(lanesOf(() => [mlp]), o);
    let text = await metrics.render();
    expect(gaugeIn(text, 'npu_fleet_local_queue_depth', 'model="mlp",priority="0"')).toBe(100);
    expect(text).not.toMatch(/^npu_fleet_(device_seconds_per_request|local_backlog_seconds|source_backlog_seconds|backlog_seconds)\{/m);

    mlp.scheduler.recordCompletion(32, 4, 0);
    // A small gear's batch is no full batch: the cost stays gear 32's.
    mlp.scheduler.recordCompletion(1, 3, 0);
    await exportWorkerGauges(lanesOf(() => [mlp]), o);
    text = await metrics.render();
    expect(gaugeIn(text, 'npu_fleet_device_seconds_per_request', 'model="mlp"')).toBe(0.000125);
    expect(gaugeIn(text, 'npu_fleet_local_backlog_seconds', 'model="mlp"')).toBe(0.0125);
    expect(gaugeIn(text, 'npu_fleet_source_backlog_seconds', 'model="mlp"')).toBeCloseTo(0.1125, 12);
    expect(gaugeIn(text, 'npu_fleet_backlog_seconds', 'model="mlp"')).toBeCloseTo(0.125, 12);

    // The broker drained; the local queue holds what it held.
    lag = 0;
    await exportWorkerGauges(lanesOf(() => [mlp]), o);
    text = await metrics.render();
    expect(gaugeIn(text, 'npu_fleet_source_backlog_seconds', 'model="mlp"')).toBe(0);
    expect(gaugeIn(text, 'npu_fleet_backlog_seconds', 'model="mlp"')).toBe(0.0125);
    await transport.close();
  });

  it('on Kafka the lag holds the local queue already (committed offsets): this worker\'s backlog is the lag\'s, not lag + queue', async () => {
    const metrics = new FleetMetrics({ processMetrics: false });
    const mlp = schedulerLane('mlp');
    // Kafka's lag runs from the group's committed offsets: the 100 requests fetched into this
    // worker's queue and not settled are among its 1000.
    const transport = { kind: 'kafka', sourceLag: () => Promise.resolve({ mlp: 1000 }) } as unknown as Transport;
    const o = { deviceId: 0, device: idleDevice, transport, metrics, log, nowMs: () => 1_000 };
    for (let i = 0; i < 100; i++) enqueue(mlp, `r${i}`);
    mlp.scheduler.recordCompletion(32, 4, 0); // 0.125 ms a request
    await exportWorkerGauges(lanesOf(() => [mlp]), o);
    const text = await metrics.render();
    expect(gaugeIn(text, 'npu_fleet_local_backlog_seconds', 'model="mlp"')).toBe(0.0125);
    expect(gaugeIn(text, 'npu_fleet_source_backlog_seconds', 'model="mlp"')).toBe(0.125);
    // 1000 requests x 0.125 ms, not (1000 + 100) x 0.125 ms.
    expect(gaugeIn(text, 'npu_fleet_backlog_seconds', 'model="mlp"')).toBe(0.125);
  });

  it('each lane\'s queue at its own cost (an unmeasured lane at the model\'s), the broker\'s requests at the default lane\'s cost per request (mean items); all pinned: the costliest', () => {
    const mlp = schedulerLane('mlp', { maxQueueDelayMs: [0, 0, 0] });
    enqueue(mlp, 'two', { items: 2 });
    enqueue(mlp, 'four', { items: 4 });
    const d = mlp.scheduler.decide(0);
    expect(d.kind).toBe('dispatch');
    mlp.scheduler.recordCompletion(32, 4, 1); // 0.125 ms an item, 3 items a request
    for (let i = 0; i < 10; i++) enqueue(mlp, `q${i}`);
    const pinnedNew = schedulerLane('mlp', {}, '1'); // not measured
    enqueue(pinnedNew, 'five', { items: 5 });
    const pinnedSlow = schedulerLane('mlp', {}, '2');
    pinnedSlow.scheduler.recordCompletion(32, 16, 0); // 0.5 ms an item
    enqueue(pinnedSlow, 'p2', { items: 2 });
    const cnnFast = schedulerLane('cnn', {}, '1');
    cnnFast.scheduler.recordCompletion(8, 1, 0); // gear 32 derived: 1 ms scaled by the prior (5 + 0.5 g): 21 / 9 ms
    const cnnSlow = schedulerLane('cnn', {}, '2');
    cnnSlow.scheduler.recordCompletion(32, 64, 0); // 2 ms an item
    enqueue(cnnFast, 'c', { items: 3 });

    const readings = backlogReadings([mlp, pinnedNew, pinnedSlow, cnnFast, cnnSlow], { mlp: 100 });
    const m = readings.get('mlp');
    expect(m?.deviceSecondsPerRequest).toBeCloseTo(0.000375, 15);
    // (10 + 5) items x 0.125 ms + 2 items x 0.5 ms
    expect(m?.localSeconds).toBeCloseTo(0.002875, 15);
    expect(m?.sourceLag).toBe(100);
    const c = readings.get('cnn');
    expect(c?.deviceSecondsPerRequest).toBeCloseTo(0.002, 15);
    expect(c?.localSeconds).toBeCloseTo((3 * (21 / 9)) / 32 / 1000, 15);
    expect(c?.sourceLag).toBeUndefined();
  });

  it('oldest queued age per priority, since arrival on this worker, by the clock it is given; an empty level has none', async () => {
    const metrics = new FleetMetrics({ processMetrics: false });
    const transport = new MemoryTransport({ broker: new MemoryBroker() });
    const mlp = schedulerLane('mlp');
    const pinned = schedulerLane('mlp', {}, '1');
    enqueue(mlp, 'old', { priority: 2, at: 1_000 });
    enqueue(mlp, 'new', { priority: 2, at: 3_000 });
    enqueue(mlp, 'urgent', { priority: 0, at: 4_000 });
    enqueue(pinned, 'pinned-urgent', { priority: 0, at: 3_500 });
    let now = 5_500;
    const o = { deviceId: 0, device: idleDevice, transport, metrics, log, nowMs: () => now };
    await exportWorkerGauges(lanesOf(() => [mlp, pinned]), o);
    let text = await metrics.render();
    expect(gaugeIn(text, 'npu_fleet_oldest_queued_age_seconds', 'model="mlp",priority="2"')).toBe(4.5);
    expect(gaugeIn(text, 'npu_fleet_oldest_queued_age_seconds', 'model="mlp",priority="0"')).toBe(2); // the pinned lane's, the older
    expect(gaugeIn(text, 'npu_fleet_oldest_queued_age_seconds', 'model="mlp",priority="1"')).toBeUndefined();

    mlp.scheduler.remove('old');
    pinned.scheduler.remove('pinned-urgent');
    mlp.scheduler.remove('urgent');
    now = 6_000;
    await exportWorkerGauges(lanesOf(() => [mlp, pinned]), o);
    text = await metrics.render();
    expect(gaugeIn(text, 'npu_fleet_oldest_queued_age_seconds', 'model="mlp",priority="2"')).toBe(3);
    expect(gaugeIn(text, 'npu_fleet_oldest_queued_age_seconds', 'model="mlp",priority="0"')).toBeUndefined();
    await transport.close();
  });

  it('a model that leaves the worker takes its backlog and age gauges with it', async () => {
    const metrics = new FleetMetrics({ processMetrics: false });
    const transport = new MemoryTransport({ broker: new MemoryBroker() });
    transport.sourceLag = () => Promise.resolve({ mlp: 5, cnn: 7 });
    const mlp = schedulerLane('mlp');
    const cnn = schedulerLane('cnn');
    for (const l of [mlp, cnn]) {
      l.scheduler.recordCompletion(32, 4, 0);
      enqueue(l, 'a', { at: 0 });
    }
    let lanes = [mlp, cnn];
    const o = { deviceId: 0, device: idleDevice, transport, metrics, log, nowMs: () => 1_000 };
    await exportWorkerGauges(lanesOf(() => lanes), o);
    const cnnLines = (text: string) => text.split('\n').filter((l) => l.startsWith('npu_fleet_') && l.includes('model="cnn"'));
    const before = cnnLines(await metrics.render()).map((l) => l.slice(0, l.indexOf('{')));
    for (const name of ['npu_fleet_oldest_queued_age_seconds', 'npu_fleet_device_seconds_per_request', 'npu_fleet_local_backlog_seconds', 'npu_fleet_source_backlog_seconds', 'npu_fleet_backlog_seconds']) {
      expect(before).toContain(name);
    }
    lanes = [mlp];
    await exportWorkerGauges(lanesOf(() => lanes), o);
    const text = await metrics.render();
    expect(cnnLines(text)).toEqual([]);
    expect(gaugeIn(text, 'npu_fleet_backlog_seconds', 'model="mlp"')).toBeCloseTo(6 * 0.000125, 12);
    await transport.close();
  });
});

describe('workerGaugeHooks', () => {
  it('a source-lag read that hangs (a broker outage) does not freeze the local queue gauges', async () => {
    const metrics = new FleetMetrics({ processMetrics: false, scrapeHookTimeoutMs: 50 });
    let depth = 3;
    const cost = { gear: 8, deviceMsPerItem: 0.5, itemsPerRequest: 1 };
    const lanes = { allLanes: () => [lane('mlp', [depth], 100 * depth, cost)], serves: () => true, servedVersions: () => [], subscriptions: () => [] } as unknown as ModelLanes<unknown>;
    const device: DeviceLike = { id: 0, loadModel: () => Promise.reject(new Error('not used')), memInfo: () => Promise.resolve({ freeBytes: 1, totalBytes: 2 }), close: () => Promise.resolve() };
    const transport = new MemoryTransport({ broker: new MemoryBroker() });
    let lagReads = 0;
    // Never answers, as a BullMQ count retried forever while Redis is away.
    transport.sourceLag = () => {
      lagReads += 1;
      return new Promise(() => undefined);
    };
    for (const hook of workerGaugeHooks(lanes, { deviceId: 0, device, transport, metrics, log: createLogger({ level: 'silent' }) })) metrics.onScrape(hook);
    const depthOf = (text: string): number | undefined => {
      const m = /^npu_fleet_local_queue_depth\{model="mlp",priority="0"\} (\S+)$/m.exec(text);
      return m ? Number(m[1]) : undefined;
    };
    const first = await metrics.render();
    expect(depthOf(first)).toBe(3);
    expect(gaugeIn(first, 'npu_fleet_local_backlog_seconds', 'model="mlp"')).toBe(0.0015);
    depth = 7;
    const text = await metrics.render();
    expect(depthOf(text)).toBe(7);
    expect(text).toMatch(/^npu_fleet_local_queue_bytes\{model="mlp"\} 700$/m);
    // The backlog's local part follows the queue too; without a lag read there is no source part or total.
    expect(gaugeIn(text, 'npu_fleet_local_backlog_seconds', 'model="mlp"')).toBe(0.0035);
    expect(text).not.toMatch(/^npu_fleet_(source_)?backlog_seconds\{/m);
    expect(lagReads).toBe(1); // the hung read is not started again on top of itself
    await transport.close();
  });
});

describe('exportWorkerGauges across a hot reload', () => {
  let h: WorkerHarness | undefined;
  afterEach(async () => {
    await stopWorker(h);
    h = undefined;
  });

  /** The per-model gauge lines of a scrape that name `model`. */
  const gaugeLines = (text: string, model: string): string[] =>
    text.split('\n').filter((l) => /^npu_fleet_(local_queue_depth|local_queue_bytes|source_lag|oldest_queued_age_seconds|device_seconds_per_request|(local_|source_)?backlog_seconds)\{/.test(l) && l.includes(`model="${model}"`));

  it('a model served but not asked yet (a worker just started or restarted) lists its queue gauges at 0, not none', async () => {
    h = await startWorker(snapshotOf('1'));
    const { worker, metrics } = h;
    metrics.onScrape(() => worker.exportGauges());
    const lines = gaugeLines(await metrics.render(), MODEL);
    for (const level of [0, 1, 2]) expect(lines).toContain(`npu_fleet_local_queue_depth{model="${MODEL}",priority="${level}"} 0`);
    expect(lines).toContain(`npu_fleet_local_queue_bytes{model="${MODEL}"} 0`);
  });

  it('a model removed from the repository keeps its gauges while it drains, and leaves them once unloaded', async () => {
    h = await startWorker(snapshotOf('1'));
    const { worker, metrics, producer, executions, results } = h;
    metrics.onScrape(() => worker.exportGauges());
    await producer.publish(request('on-device', 1));
    await until(() => executions.length === 1, 2000, 'the batch on the device');
    const serving = gaugeLines(await metrics.render(), MODEL);
    expect(serving).toContain(`npu_fleet_local_queue_depth{model="${MODEL}",priority="1"} 0`);
    expect(serving.some((l) => l.startsWith(`npu_fleet_local_queue_bytes{model="${MODEL}"}`))).toBe(true);
    expect(serving.some((l) => l.startsWith(`npu_fleet_source_lag{model="${MODEL}",transport="memory"}`))).toBe(true);

    await worker.applySnapshot(snapshotOf());
    // Version 1 drains the batch it runs: the model is still on this worker.
    expect(gaugeLines(await metrics.render(), MODEL)).toEqual(serving);
    executions[0]?.release();
    await until(() => results.has('on-device') && !h!.loaded.has('1'), 2000, 'the drained version unloaded');
    const text = await metrics.render();
    expect(gaugeLines(text, MODEL)).toEqual([]);
    // Its counters stay: they are history, not a reading.
    expect(text).toContain(`npu_fleet_requests_total{model="${MODEL}",status="ok"} 1`);
  });
});

describe('npu_fleet_model_version_served', () => {
  const harnesses: WorkerHarness[] = [];
  afterEach(async () => {
    for (const h of harnesses.splice(0)) await stopWorker(h);
  });
  const served = async (h: WorkerHarness, version: string): Promise<number> => {
    await h.worker.exportGauges();
    return sample(await h.metrics.render(), 'npu_fleet_model_version_served', { model: MODEL, version });
  };

  it('shows which version each worker serves, so a version that failed to load on one worker shows as workers that differ', async () => {
    const a = await startWorker(snapshotOf('1'));
    const b = await startWorker(snapshotOf('1'));
    harnesses.push(a, b);
    expect([await served(a, '1'), await served(b, '1')]).toEqual([1, 1]);
    // Version 2 loads on a's device but not on b's: b keeps serving 1.
    const load = b.device.loadModel.bind(b.device);
    b.device.loadModel = (path) => (path.includes('/2/') ? Promise.reject(new Error('ACL_ERROR_GE_FAILURE')) : load(path));
    await a.worker.applySnapshot(snapshotOf('2'));
    await b.worker.applySnapshot(snapshotOf('2'));
    expect([await served(a, '2'), await served(a, '1')]).toEqual([1, 0]);
    expect([await served(b, '2'), await served(b, '1')]).toEqual([0, 1]);
  });
});
