import { describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { EXIT_DRAIN_TIMEOUT, EXIT_OK, runWorker } from '../../../src/runtime/worker-process.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { MODEL, controlledDevice, request, until } from './fake-device-worker.ts';

/** A worker on a device whose batches finish only when released, with a short drain timeout. */
async function slowWorker(drainTimeoutMs: number) {
  const dev = controlledDevice({ unloadWaitsForExecutions: true });
  let closed = 0;
  const broker = new MemoryBroker();
  // The hang limit is far away: the batch is slow, not hung.
  const config = parseFleetConfig({ modelRepository: 'examples/models', models: [MODEL], devices: { count: 1, backend: 'sim' }, worker: { metricsPort: 0, hangLimitMs: 60_000, drainTimeoutMs } });
  const running = await runWorker(
    config,
    0,
    { artifact: 'onnx', openDevice: () => Promise.resolve({ ...dev.device, close: () => ((closed += 1), dev.device.close()) }), createTransport: () => new MemoryTransport({ broker }) },
    { log: createLogger({ level: 'silent' }), metricsPort: 0 },
  );
  const producer = new MemoryProducer({ broker });
  return { dev, running, producer, closed: () => closed };
}

describe('stopping a worker: the exit code says whether the drain finished within worker.drainTimeoutMs', () => {
  it('a batch still on the device at the drain timeout: stop() returns EXIT_DRAIN_TIMEOUT soon after it, without waiting for the batch to unload its model', async () => {
    const { dev, running, producer, closed } = await slowWorker(300);
    try {
      await producer.publish(request('slow', 0));
      await until(() => dev.executions.length === 1, 3000, 'the batch on the device');
      const stoppedAt = Date.now();
      const code = await Promise.race([running.stop(), new Promise<'still waiting'>((r) => setTimeout(() => r('still waiting'), 8000))]);
      // It used to wait in unload for the batch, up to the hang limit, and then exit 0 as if drained.
      expect(code).toBe(EXIT_DRAIN_TIMEOUT);
      expect(Date.now() - stoppedAt).toBeLessThan(300 + 3_500);
      expect(dev.unloadedWhileRunning, 'a model unloaded under its running batch').toEqual([]);
      expect(closed(), 'the device closed under its running batch').toBe(0);
    } finally {
      for (const e of dev.executions) e.release();
      await producer.close();
    }
  }, 20_000);

  it('a drain that finishes in time returns EXIT_OK and closes the device', async () => {
    const { dev, running, producer, closed } = await slowWorker(5_000);
    try {
      await producer.publish(request('quick', 0));
      await until(() => dev.executions.length === 1, 3000, 'the batch on the device');
      const stopping = running.stop();
      setTimeout(() => dev.executions[0]?.release(), 200);
      expect(await stopping).toBe(EXIT_OK);
      expect(closed()).toBe(1);
    } finally {
      for (const e of dev.executions) e.release();
      await producer.close();
    }
  }, 20_000);
});
