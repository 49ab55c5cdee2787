import { describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';
import { DeviceWorker } from '../../../src/runtime/device-worker.ts';
import type { DeviceLike } from '../../../src/runtime/load-checked.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';

/** A device with no models: only memInfo matters here; its answer is set by the test. */
function fakeDevice(id: number, memInfo: () => Promise<{ freeBytes: number; totalBytes: number }>): DeviceLike {
  return {
    id,
    loadModel: () => Promise.reject(new Error('not used')),
    memInfo,
    close: () => Promise.resolve(),
  };
}

/** A worker wired like runWorker wires it: exportGauges runs on every scrape. Not started (no lanes). */
function scrapedWorker(device: DeviceLike) {
  const lines: Array<Record<string, unknown>> = [];
  const log = createLogger({ level: 'debug', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
  const metrics = new FleetMetrics({ processMetrics: false, defaultLabels: { worker: `device-${device.id}` } });
  const transport = new MemoryTransport({ broker: new MemoryBroker() });
  const worker = new DeviceWorker({
    config: parseFleetConfig({}),
    deviceId: device.id,
    device,
    transport,
    metrics,
    log,
    snapshot: { dir: '', models: new Map(), problems: [] },
  });
  metrics.onScrape(() => worker.exportGauges());
  const scrape = async (): Promise<number | undefined> => {
    const text = await metrics.render();
    const m = new RegExp(`^npu_fleet_device_memory_used_bytes\\{device="${device.id}",worker="device-${device.id}"\\} (\\S+)$`, 'm').exec(text);
    return m ? Number(m[1]) : undefined;
  };
  return { scrape, lines, metrics, close: () => transport.close() };
}

describe('DeviceWorker.exportGauges: device memory', () => {
  it('exports total - free from the device on every scrape', async () => {
    const totalBytes = 32 * 2 ** 30;
    let freeBytes = totalBytes - 1_000_000;
    let calls = 0;
    const w = scrapedWorker(
      fakeDevice(3, () => {
        calls += 1;
        return Promise.resolve({ freeBytes, totalBytes });
      }),
    );
    expect(await w.scrape()).toBe(1_000_000);
    freeBytes -= 524_288; // e.g. a version loaded
    expect(await w.scrape()).toBe(1_524_288);
    freeBytes += 524_288; // and unloaded again
    expect(await w.scrape()).toBe(1_000_000);
    expect(calls).toBe(3);
    await w.close();
  });

  it('a failing memInfo does not break the scrape: the last value stays and the error is logged at debug', async () => {
    let fail = false;
    const w = scrapedWorker(
      fakeDevice(1, () =>
        fail ? Promise.reject(new FleetError('CLOSED', 'memInfo: device is closed')) : Promise.resolve({ freeBytes: 600, totalBytes: 1000 }),
      ),
    );
    expect(await w.scrape()).toBe(400);
    fail = true;
    w.metrics.setWorkerReady(true);
    const text = await w.metrics.render();
    expect(text).toMatch(/^npu_fleet_worker_ready\{worker="device-1"\} 1$/m);
    expect(await w.scrape()).toBe(400);
    const unavailable = w.lines.filter((l) => l.msg === 'device memory unavailable');
    expect(unavailable.length).toBe(2);
    expect(unavailable[0]?.level).toBe(20); // pino debug
    await w.close();
  });
});
