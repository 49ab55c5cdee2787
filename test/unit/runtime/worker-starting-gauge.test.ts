import { afterEach, describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import type { DeviceLike } from '../../../src/runtime/load-checked.ts';
import { runWorker, type RunningWorker } from '../../../src/runtime/worker-process.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { until } from '../../helpers/until.ts';
import { MODEL, controlledDevice } from './fake-device-worker.ts';

const config = parseFleetConfig({ modelRepository: 'examples/models', models: [MODEL], devices: { count: 1, backend: 'sim' }, worker: { metricsPort: 0 } });

const started: RunningWorker[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map(async (w) => w.stop()));
});

/** The value of a label-less worker gauge as Prometheus scrapes it from the worker's port. */
async function scraped(port: number, name: string): Promise<string | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return new RegExp(`^${name}\\{worker="device-0"\\} (\\S+)$`, 'm').exec(text)?.[1];
}

describe('npu_fleet_worker_starting: an unready start-up is told from a worker that turned unready', () => {
  it('is 1 while a model load holds the start-up (ready 0), and 0 once the worker is ready', async () => {
    const dev = controlledDevice();
    const loads: Array<() => void> = [];
    // A long model load: it returns only when the test lets it.
    const device: DeviceLike = {
      ...dev.device,
      loadModel: async (path, opts) => {
        await new Promise<void>((resolve) => loads.push(resolve));
        return await dev.device.loadModel(path, opts);
      },
    };
    const broker = new MemoryBroker();
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    const running = runWorker(config, 0, { artifact: 'onnx', openDevice: () => Promise.resolve(device), createTransport: () => new MemoryTransport({ broker }) }, { log });
    await until(() => loads.length > 0, 10_000, 'the start-up to load the model');
    const port = Number(lines.find((l) => typeof l.metricsPort === 'number')?.metricsPort);
    expect(port).toBeGreaterThan(0);

    expect(await scraped(port, 'npu_fleet_worker_starting')).toBe('1');
    expect(await scraped(port, 'npu_fleet_worker_ready')).toBe('0');
    expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(503);

    for (const release of loads.splice(0)) release();
    const worker = await running;
    started.push(worker);
    expect(await scraped(port, 'npu_fleet_worker_starting')).toBe('0');
    expect(await scraped(port, 'npu_fleet_worker_ready')).toBe('1');
  });
});
