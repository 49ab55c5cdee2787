import { describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { startEmbeddedFleet } from '../../../src/runtime/embedded-fleet.ts';
import { EXIT_HANG } from '../../../src/runtime/worker-process.ts';
import { MODEL, controlledDevice, request, until } from './fake-device-worker.ts';

describe('embedded fleet stop (npm start + Ctrl-C)', () => {
  it('drains every worker at once: none keeps taking work while another drains', async () => {
    const devices = [controlledDevice(), controlledDevice()];
    const config = parseFleetConfig({
      modelRepository: 'examples/models',
      models: [MODEL],
      devices: { count: 2, backend: 'sim' },
      worker: { metricsPort: 0, drainTimeoutMs: 5000, hangLimitMs: 60_000 },
      demo: { enabled: false },
    });
    const fleet = await startEmbeddedFleet(config, { artifact: 'onnx', openDevice: (id) => Promise.resolve(devices[id]!.device) }, createLogger({ level: 'silent' }), () => {});
    const producer = new MemoryProducer({ broker: fleet.broker });
    // More than one worker's prefetch (the broker hands out 256 at a time): both devices hold a
    // batch they cannot finish until released.
    await producer.publish(Array.from({ length: 1000 }, (_, i) => request(`r${i}`, 1)));
    await until(() => devices.every((d) => d.executions.length > 0), 5000, 'a batch on each device');
    const stopping = fleet.stop();
    await until(() => fleet.workers.every((w) => w.worker.status === 'draining'), 1000, 'every worker draining at once');
    for (const d of devices) for (const e of d.executions) e.release();
    // Batches admitted before intake stopped keep coming: release them as they start.
    const releaser = setInterval(() => {
      for (const d of devices) for (const e of d.executions) e.release();
    }, 10);
    expect(await stopping).toBe(0);
    clearInterval(releaser);
    expect(fleet.workers.map((w) => w.worker.status)).toEqual(['stopped', 'stopped']);
    await producer.close();
  }, 30_000);

  it('a device that hangs: its worker hands back what it held and the other device answers all of it', async () => {
    const devices = [controlledDevice(), controlledDevice()];
    const config = parseFleetConfig({
      modelRepository: 'examples/models',
      models: [MODEL],
      devices: { count: 2, backend: 'sim' },
      worker: { metricsPort: 0, hangLimitMs: 300 },
      demo: { enabled: false },
    });
    const fleet = await startEmbeddedFleet(config, { artifact: 'onnx', openDevice: (id) => Promise.resolve(devices[id]!.device) }, createLogger({ level: 'silent' }), () => {});
    const producer = new MemoryProducer({ broker: fleet.broker });
    const results = new Map<string, string>();
    await producer.subscribeReplies('test.replies', (r) => results.set(r.id, r.status));
    // Device 1 finishes whatever it gets; device 0 never finishes its first batch.
    const releaser = setInterval(() => {
      for (const e of devices[1]!.executions) e.release();
    }, 5);
    const reqs = Array.from({ length: 1000 }, (_, i) => request(`r${i}`, 1));
    await producer.publish(reqs);
    await until(() => fleet.workers[0]!.worker.status === 'hung', 5000, 'device 0 to hang');
    await until(() => reqs.every((r) => results.has(r.id)), 10_000, 'every request answered by device 1');
    clearInterval(releaser);
    expect(devices[0]!.executions.length).toBeGreaterThan(0);
    expect([...results.values()].every((s) => s === 'ok')).toBe(true);
    expect(await fleet.stop()).toBe(EXIT_HANG);
    for (const e of devices[0]!.executions) e.release();
    await producer.close();
  }, 30_000);
});
