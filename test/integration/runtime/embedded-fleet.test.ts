import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeRequestBinary } from '../../../src/codec/index.ts';
import { parseFleetConfig, loadModelConfig } from '../../../src/contracts/config-loader.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { prng, syntheticRequest } from '../../../src/runtime/demo-load.ts';
import { startEmbeddedFleet, type EmbeddedFleet } from '../../../src/runtime/embedded-fleet.ts';

const config = parseFleetConfig({ devices: { count: 2, backend: 'sim' }, worker: { metricsPort: 0 }, log: { level: 'warn' } });
let fleet: EmbeddedFleet;
let producer: MemoryProducer;
const results = new Map<string, ResultEnvelope>();

beforeAll(async () => {
  process.env.NPU_FLEET_DEVICE = 'sim';
  fleet = await startEmbeddedFleet(config, { artifact: 'onnx', openDevice }, createLogger({ level: 'warn' }), () => {});
  producer = new MemoryProducer({ broker: fleet.broker });
  await producer.subscribeReplies('it.replies', (r) => results.set(r.id, r));
}, 60_000);

afterAll(async () => {
  await producer?.close();
  expect(await fleet?.stop()).toBe(0);
});

async function until(ids: string[], timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!ids.every((id) => results.has(id))) {
    if (Date.now() > end) throw new Error(`missing results: ${ids.filter((id) => !results.has(id)).join(', ')}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('embedded fleet (memory broker, two simulated devices)', () => {
  it('serves every example model, batching requests and padding to gears', async () => {
    const rand = prng(3);
    const ids: string[] = [];
    for (const name of ['mlp-classifier', 'small-cnn', 'text-classifier']) {
      const model = loadModelConfig(`examples/models/${name}/config.yaml`);
      const reqs = Array.from({ length: 40 }, (_, i) => syntheticRequest(model, i, rand, { idPrefix: `it-${name}`, replyTo: 'it.replies', deadlineShare: 0 }));
      ids.push(...reqs.map((r) => r.id));
      await producer.publish(reqs);
    }
    await until(ids);
    for (const id of ids) {
      const r = results.get(id)!;
      expect(r.status, JSON.stringify(r.error)).toBe('ok');
      expect(r.version).toBe('1');
      expect(r.gear).toBeGreaterThanOrEqual(r.batchSize);
      expect([0, 1]).toContain(r.device);
      expect(r.outputs?.[0]?.dtype).toBe('float32');
    }
    const batched = ids.map((id) => results.get(id)!).filter((r) => r.batchSize > (r.outputs?.[0]?.shape[0] ?? 0));
    expect(batched.length).toBeGreaterThan(0); // several requests shared a batch
    const mlp = results.get(ids[0]!)!;
    const probs = new Float32Array(new Uint8Array(mlp.outputs![0]!.data).buffer);
    const rowSum = probs.slice(0, 10).reduce((a, b) => a + b, 0);
    expect(rowSum).toBeCloseTo(1, 4); // softmax output
  });

  it('answers invalid, unknown-model and already-expired requests without the device', async () => {
    const model = loadModelConfig('examples/models/mlp-classifier/config.yaml');
    const rand = prng(5);
    const good = syntheticRequest(model, 0, rand, { idPrefix: 'it-x', replyTo: 'it.replies', deadlineShare: 0 });
    const expired = { ...good, id: 'it-expired', deadlineAt: Date.now() - 10 };
    const unknown = { ...good, id: 'it-unknown', model: 'nope' };
    const wrongShape = { ...good, id: 'it-shape', inputs: [{ ...good.inputs[0]!, shape: [1, 3], data: new Uint8Array(12) }] };
    await producer.publishRaw([
      { model: 'mlp-classifier', body: encodeRequestBinary(expired) },
      { model: 'mlp-classifier', body: encodeRequestBinary(unknown) },
      { model: 'mlp-classifier', body: encodeRequestBinary(wrongShape) },
      { model: 'mlp-classifier', body: new Uint8Array([1, 2, 3]) },
    ]);
    await until(['it-expired', 'it-unknown', 'it-shape']);
    expect(results.get('it-expired')).toMatchObject({ status: 'expired', device: -1, gear: 0, timings: { deviceMs: 0 } });
    expect(results.get('it-unknown')).toMatchObject({ status: 'rejected', error: { code: 'UNKNOWN_MODEL' } });
    expect(results.get('it-shape')).toMatchObject({ status: 'invalid', error: { code: 'INVALID_MESSAGE' } });
    expect(results.get('it-shape')?.error?.message).toMatch(/inputs\[0\]\.shape\[1\]/);
    const deadline = Date.now() + 5000;
    while (fleet.broker.depth('mlp-classifier.dlq') < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(fleet.broker.depth('mlp-classifier.dlq')).toBeGreaterThanOrEqual(3); // garbage, unknown model, bad shape
  });

  it('serves Prometheus metrics from each worker', async () => {
    const res = await fetch(`http://127.0.0.1:${fleet.workers[0]!.metricsPort}/metrics`);
    const text = await res.text();
    expect(res.status).toBe(200);
    expect(text).toMatch(/npu_fleet_requests_total\{[^}]*status="ok"/);
    expect(text).toMatch(/npu_fleet_batch_size_bucket/);
    const ready = await fetch(`http://127.0.0.1:${fleet.workers[1]!.metricsPort}/readyz`);
    expect(ready.status).toBe(200);
  });
});
