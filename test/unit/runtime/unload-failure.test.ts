import { afterEach, describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { DeviceWorker } from '../../../src/runtime/device-worker.ts';
import type { DeviceLike } from '../../../src/runtime/load-checked.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { controlledDevice, MODEL, request, snapshotOf, until } from './fake-device-worker.ts';

const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
let cleanup: (() => Promise<void>) | undefined;
afterEach(async () => {
  process.off('unhandledRejection', onUnhandled);
  await cleanup?.();
  cleanup = undefined;
  unhandled.length = 0;
});

/** A started worker serving version 1 on `device`, over a memory broker, with its answers and log lines. */
async function serveOn(device: DeviceLike) {
  const broker = new MemoryBroker();
  const transport = new MemoryTransport({ broker });
  const lines: Array<Record<string, unknown>> = [];
  const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
  const config = parseFleetConfig({ devices: { count: 1, backend: 'sim' }, models: [MODEL], worker: { metricsPort: 0 } });
  const worker = new DeviceWorker({ config, deviceId: 0, device, transport, metrics: new FleetMetrics({ processMetrics: false }), log, snapshot: snapshotOf('1') });
  await worker.start();
  const producer = new MemoryProducer({ broker });
  const results = new Map<string, ResultEnvelope>();
  await producer.subscribeReplies('test.replies', (r) => void results.set(r.id, r));
  return { worker, producer, results, lines };
}

describe('a drained model version whose unload fails on the device', () => {
  it('is logged, and the worker goes on serving the new version (no unhandled rejection, no stalled loop)', async () => {
    process.on('unhandledRejection', onUnhandled);
    const base = controlledDevice();
    // aclmdlUnload can fail on a real NPU (a device fault); version 1's does here.
    const device: DeviceLike = {
      ...base.device,
      loadModel: async (path, opts) => {
        const model = await base.device.loadModel(path, opts);
        if (!path.includes('/1/')) return model;
        return { ...model, execute: model.execute.bind(model), unload: async () => { await model.unload(); throw new Error('aclmdlUnload failed: 507899 ACL_ERROR_RT_INTERNAL_ERROR'); } };
      },
    };
    const { worker, producer, results, lines } = await serveOn(device);
    cleanup = async () => {
      for (const e of base.executions) e.release();
      await worker.close().catch(() => undefined);
      await producer.close();
    };

    await producer.publish(request('on-v1', 0));
    await until(() => base.executions.length === 1, 2000, 'a batch on version 1');
    await worker.applySnapshot(snapshotOf('2'));
    // The batch ends: version 1 is drained and its unload fails.
    base.executions[0]!.release();
    await until(() => results.has('on-v1'), 2000, 'the result of the batch on version 1');
    expect(results.get('on-v1')).toMatchObject({ status: 'ok', version: '1' });
    await until(() => lines.some((l) => String(l.msg).startsWith('unloading a drained model version failed')), 2000, 'the failed unload logged');
    expect(lines.find((l) => String(l.msg).startsWith('unloading a drained model version failed'))).toMatchObject({ level: 50, model: MODEL, version: '1' });

    await producer.publish(request('on-v2', 0));
    await until(() => base.executions.length === 2, 2000, 'a batch on version 2');
    base.executions[1]!.release();
    await until(() => results.has('on-v2'), 2000, 'the result of the batch on version 2');
    expect(results.get('on-v2')).toMatchObject({ status: 'ok', version: '2' });
    await new Promise((r) => setTimeout(r, 20));
    expect(unhandled).toEqual([]);
  });
});

describe("a request arriving while its model's last drained version is being unloaded", () => {
  it('is rejected UNKNOWN_MODEL, not queued on a lane with no version (which failed the dispatch)', async () => {
    process.on('unhandledRejection', onUnhandled);
    const base = controlledDevice();
    const gate: { open?: () => void } = {};
    // An unload takes a while on a real NPU (aclmdlUnload, buffers freed).
    const device: DeviceLike = {
      ...base.device,
      loadModel: async (path, opts) => {
        const model = await base.device.loadModel(path, opts);
        return { ...model, execute: model.execute.bind(model), unload: async () => { await new Promise<void>((r) => (gate.open = r)); await model.unload(); } };
      },
    };
    const { worker, producer, results, lines } = await serveOn(device);
    cleanup = async () => {
      gate.open?.();
      for (const e of base.executions) e.release();
      await worker.close().catch(() => undefined);
      await producer.close();
    };

    // The model leaves the repository; its only version is idle, so its unload starts at once.
    const applying = worker.applySnapshot(snapshotOf());
    await until(() => gate.open !== undefined, 2000, 'the unload of version 1 to start');
    await producer.publish(request('during-unload', 0));
    await until(() => results.has('during-unload'), 2000, 'an answer for the request sent during the unload');
    expect(results.get('during-unload')).toMatchObject({ status: 'rejected', error: { code: 'UNKNOWN_MODEL' } });
    gate.open?.();
    await applying;
    await new Promise((r) => setTimeout(r, 20));
    expect(lines.filter((l) => (l.level as number) >= 50)).toEqual([]);
    expect(unhandled).toEqual([]);
  });
});
