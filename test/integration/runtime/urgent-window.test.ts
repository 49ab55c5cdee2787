import { afterAll, describe, expect, it } from 'vitest';
import { parseFleetConfig, loadModelConfig } from '../../../src/contracts/config-loader.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { prng, syntheticRequest } from '../../../src/runtime/demo-load.ts';
import type { DeviceLike } from '../../../src/runtime/load-checked.ts';
import { runWorker, type RunningWorker } from '../../../src/runtime/worker-process.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { withExecute } from '../../helpers/wrapped-device.ts';

// Each request's first feature says its priority, so a recorded batch shows what it carried.
const MARK = [100, 200, 300];

interface Exec {
  dispatchedAt: number;
  doneAt: number;
  levels: Set<number>;
  items: number;
}

/**
 * The real simulated device, behind a stream that runs batches one after another for
 * 2 ms + 0.1 ms per gear slot (the bench device model), recording what each batch carried.
 */
function recordingDevice(inner: DeviceLike, log: Exec[]): DeviceLike {
  let stream: Promise<unknown> = Promise.resolve();
  return withExecute(inner, (model) => (inputs, gear) => {
    const rows = new Float32Array(inputs[0]!.data.buffer, inputs[0]!.data.byteOffset, inputs[0]!.data.byteLength / 4);
    const levels = new Set<number>();
    let items = 0;
    for (let r = 0; r < gear; r++) {
      const level = MARK.indexOf(rows[r * 64] ?? 0);
      if (level >= 0) {
        levels.add(level);
        items++;
      }
    }
    const exec: Exec = { dispatchedAt: performance.now(), doneAt: Infinity, levels, items };
    log.push(exec);
    const run = stream.then(async () => {
      await new Promise((r) => setTimeout(r, 2 + 0.1 * gear));
      const out = await model.execute(inputs, gear);
      exec.doneAt = performance.now();
      return out;
    });
    stream = run.catch(() => undefined);
    return run;
  });
}

let worker: RunningWorker | undefined;
afterAll(async () => {
  await worker?.stop();
});

describe('device worker while urgent traffic flows', () => {
  it('keeps the second slot free of bulk batches and sends urgent batches without filler', async () => {
    process.env.NPU_FLEET_DEVICE = 'sim';
    const config = parseFleetConfig({ devices: { count: 1, backend: 'sim' }, models: ['mlp-classifier'], worker: { metricsPort: 0 }, log: { level: 'warn' } });
    const broker = new MemoryBroker();
    const execs: Exec[] = [];
    worker = await runWorker(
      config,
      0,
      { artifact: 'onnx', openDevice: async (id) => recordingDevice(await openDevice(id), execs), createTransport: () => new MemoryTransport({ broker }) },
      { log: createLogger({ level: 'warn' }), metricsPort: 0 },
    );
    const producer = new MemoryProducer({ broker });
    const results = new Map<string, ResultEnvelope>();
    await producer.subscribeReplies('urgent.replies', (r) => results.set(r.id, r));
    const model = loadModelConfig('examples/models/mlp-classifier/config.yaml');
    const rand = prng(5);
    const make = (n: number, priority: number, prefix: string) =>
      Array.from({ length: n }, (_, i) => {
        const r = syntheticRequest(model, i, rand, { idPrefix: prefix, replyTo: 'urgent.replies', deadlineShare: 0, maxSamples: 1 });
        new DataView(r.inputs[0]!.data.buffer, r.inputs[0]!.data.byteOffset).setFloat32(0, MARK[priority]!, true);
        return { ...r, priority };
      });
    const bulk = make(1500, 2, 'bulk');
    await producer.publish(bulk);
    await new Promise((r) => setTimeout(r, 30));
    const urgent = make(40, 0, 'urgent');
    for (const r of urgent) {
      await producer.publish({ ...r, createdAt: Date.now() });
      await new Promise((res) => setTimeout(res, 5));
    }
    const all = [...bulk, ...urgent];
    const end = Date.now() + 60_000;
    while (!all.every((r) => results.has(r.id)) && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    await producer.close();
    for (const r of all) expect(results.get(r.id)?.status).toBe('ok');

    const urgentExecs = execs.filter((e) => e.levels.has(0));
    expect(urgentExecs.length).toBeGreaterThan(0);
    // No bulk filler in a batch that carries urgent work.
    for (const e of urgentExecs) expect([...e.levels]).toEqual([0]);
    // At an urgent batch's dispatch, at most one bulk batch is ahead of it on the device.
    let worstAhead = 0;
    for (const e of urgentExecs) {
      const ahead = execs.filter((b) => !b.levels.has(0) && b.dispatchedAt < e.dispatchedAt && b.doneAt > e.dispatchedAt).length;
      worstAhead = Math.max(worstAhead, ahead);
    }
    expect(worstAhead).toBeLessThanOrEqual(1);
    // Bulk batches still fill up while urgent work flows (the cap does not shrink them).
    const bulkExecs = execs.filter((e) => !e.levels.has(0));
    const bulkDuringUrgent = bulkExecs.filter((b) => b.dispatchedAt > (urgentExecs[0]?.dispatchedAt ?? Infinity));
    expect(bulkDuringUrgent.length).toBeGreaterThan(0);
    const sizes = bulkDuringUrgent.map((b) => b.items).sort((a, b) => a - b);
    expect(sizes[Math.floor(sizes.length / 2)]).toBe(model.maxBatchSize);
  }, 90_000);
});
