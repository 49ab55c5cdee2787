import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/observability/logger.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';
import type { DeviceLike, ModelLanes } from '../../../src/runtime/model-lanes.ts';
import { exportWorkerGauges } from '../../../src/runtime/worker-gauges.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';

/** A model's lane as the gauges read it: its name and the requests queued per priority level. */
const lane = (name: string, perLevel: readonly number[], queuedBytes: number) => ({
  config: { name },
  scheduler: { stats: () => ({ queuedBytes, levels: perLevel.map((requests, level) => ({ level, requests })) }) },
});

describe('exportWorkerGauges', () => {
  it('sums queue depth over a model\'s lanes (requests pinning a version queue in a lane of their own)', async () => {
    const metrics = new FleetMetrics({ processMetrics: false });
    // The default lane, and the lane of requests that pinned version 1 (fewer of them, read last).
    const lanes = { allLanes: () => [lane('mlp', [5, 40], 4000), lane('mlp', [0, 2], 200), lane('cnn', [1], 10)] } as unknown as ModelLanes<unknown>;
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
