import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/observability/logger.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';
import type { DeviceLike, ModelLanes } from '../../../src/runtime/model-lanes.ts';
import { exportWorkerGauges, workerGaugeHooks } from '../../../src/runtime/worker-gauges.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { MODEL, request, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

/** A model's lane as the gauges read it: its name and the requests queued per priority level. */
const lane = (name: string, perLevel: readonly number[], queuedBytes: number) => ({
  config: { name },
  scheduler: { stats: () => ({ queuedBytes, levels: perLevel.map((requests, level) => ({ level, requests })) }) },
});

describe('exportWorkerGauges', () => {
  it('sums queue depth over a model\'s lanes (requests pinning a version queue in a lane of their own)', async () => {
    const metrics = new FleetMetrics({ processMetrics: false });
    // The default lane, and the lane of requests that pinned version 1 (fewer of them, read last).
    const lanes = { allLanes: () => [lane('mlp', [5, 40], 4000), lane('mlp', [0, 2], 200), lane('cnn', [1], 10)], serves: () => true } as unknown as ModelLanes<unknown>;
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

describe('workerGaugeHooks', () => {
  it('a source-lag read that hangs (a broker outage) does not freeze the local queue gauges', async () => {
    const metrics = new FleetMetrics({ processMetrics: false, scrapeHookTimeoutMs: 50 });
    let depth = 3;
    const lanes = { allLanes: () => [lane('mlp', [depth], 100 * depth)], serves: () => true } as unknown as ModelLanes<unknown>;
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
    expect(depthOf(await metrics.render())).toBe(3);
    depth = 7;
    const text = await metrics.render();
    expect(depthOf(text)).toBe(7);
    expect(text).toMatch(/^npu_fleet_local_queue_bytes\{model="mlp"\} 700$/m);
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
    text.split('\n').filter((l) => /^npu_fleet_(local_queue_depth|local_queue_bytes|source_lag)\{/.test(l) && l.includes(`model="${model}"`));

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
