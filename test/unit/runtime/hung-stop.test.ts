import { describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { EXIT_HANG, runWorker } from '../../../src/runtime/worker-process.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { MODEL, controlledDevice, request, until } from './fake-device-worker.ts';

describe('stopping a worker whose device hung (in-process workers: the embedded fleet)', () => {
  it('stop() returns EXIT_HANG instead of waiting for the hung batch to let its model unload', async () => {
    const dev = controlledDevice({ unloadWaitsForExecutions: true });
    const broker = new MemoryBroker();
    const config = parseFleetConfig({ modelRepository: 'examples/models', models: [MODEL], devices: { count: 1, backend: 'sim' }, worker: { metricsPort: 0, hangLimitMs: 200 } });
    const running = await runWorker(config, 0, { artifact: 'onnx', openDevice: () => Promise.resolve(dev.device), createTransport: () => new MemoryTransport({ broker }) }, {
      log: createLogger({ level: 'silent' }),
      metricsPort: 0,
    });
    const producer = new MemoryProducer({ broker });
    await producer.publish(request('poison', 0));
    await until(() => running.worker.status === 'hung', 3000, 'the hang to be detected');
    const code = await Promise.race([running.stop(), new Promise<'hung'>((r) => setTimeout(() => r('hung'), 8000))]);
    expect(code).toBe(EXIT_HANG);
    for (const e of dev.executions) e.release();
    await producer.close();
  }, 20_000);

  it('a hang while draining: the drain gives up at its timeout, the worker stays hung and stop() returns EXIT_HANG without unloading', async () => {
    const dev = controlledDevice({ unloadWaitsForExecutions: true });
    const broker = new MemoryBroker();
    const config = parseFleetConfig({
      modelRepository: 'examples/models',
      models: [MODEL],
      devices: { count: 1, backend: 'sim' },
      worker: { metricsPort: 0, hangLimitMs: 300, drainTimeoutMs: 1000 },
    });
    const running = await runWorker(config, 0, { artifact: 'onnx', openDevice: () => Promise.resolve(dev.device), createTransport: () => new MemoryTransport({ broker }) }, {
      log: createLogger({ level: 'silent' }),
      metricsPort: 0,
    });
    const producer = new MemoryProducer({ broker });
    await producer.publish(request('poison', 0));
    await until(() => dev.executions.length > 0, 3000, 'the batch on the device');
    // SIGTERM while the batch is on the device; it then hangs during the drain.
    const stopping = running.stop();
    await until(() => running.worker.status === 'hung', 3000, 'the hang to be detected during the drain');
    const code = await Promise.race([stopping, new Promise<'hung'>((r) => setTimeout(() => r('hung'), 8000))]);
    expect(code).toBe(EXIT_HANG);
    expect(running.worker.status).toBe('hung');
    for (const e of dev.executions) e.release();
    await producer.close();
  }, 20_000);
});
