import { afterEach, describe, expect, it } from 'vitest';
import { loadModelConfig, parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { DeviceWorker } from '../../../src/runtime/device-worker.ts';
import type { DeviceLike, ExecutableModel } from '../../../src/runtime/load-checked.ts';
import type { RepositorySnapshot } from '../../../src/runtime/model-repository.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';

// Bucketed: tokens [batch, seq] int64, seq padded with token 0 up to a bound of 16, 32, 64 or 128.
const MODEL = 'text-classifier';
const config = loadModelConfig(`examples/models/${MODEL}/config.yaml`);

/** A device that keeps every tokens buffer it is given and answers at once. */
function recordingDevice() {
  const batches: Array<{ tokens: BigInt64Array; gear: number }> = [];
  const executable: ExecutableModel = {
    gears: [1, 2, 4, 8, 16, 32],
    inputs: [{ name: 'tokens', dtype: 'int64', dims: [-1, -1] }],
    outputs: [{ name: 'probs', dtype: 'float32', dims: [-1, 4] }],
    execute(inputs, gear) {
      const t = inputs[0] as { data: Uint8Array };
      batches.push({ tokens: new BigInt64Array(t.data.slice().buffer), gear });
      return Promise.resolve({ outputs: [{ data: new Uint8Array(gear * 4 * 4), dims: [gear, 4] }], timings: { copyInMs: 0.1, executeMs: 1, copyOutMs: 0.1 } });
    },
    unload: () => Promise.resolve(),
  };
  const device: DeviceLike = { id: 0, loadModel: () => Promise.resolve(executable), memInfo: () => Promise.resolve({ freeBytes: 1, totalBytes: 2 }), close: () => Promise.resolve() };
  return { device, batches };
}

/** `items` sequences of `length` tokens, none of them the pad token 0. */
function tokens(id: string, items: number, length: number): RequestEnvelope {
  const ids = new BigInt64Array(items * length).fill(7n);
  return { id, model: MODEL, priority: 2, createdAt: Date.now(), replyTo: 'test.replies', inputs: [{ name: 'tokens', dtype: 'int64', shape: [items, length], data: new Uint8Array(ids.buffer) }] };
}

/** The value of one series in the exposition (summed over the label sets that match; 0 when absent). */
function sample(text: string, name: string): number {
  let total = 0;
  for (const line of text.split('\n')) if (line.startsWith(`${name}{`) && line.includes(`model="${MODEL}"`)) total += Number(line.slice(line.lastIndexOf(' ') + 1));
  return total;
}

let stop: (() => Promise<void>) | undefined;
afterEach(async () => {
  await stop?.();
  stop = undefined;
});

describe('padding metrics of a bucketed model', () => {
  it('count the padded share of what the device got: gear rows and sequence positions padded up to the bucket bound', async () => {
    const { device, batches } = recordingDevice();
    const broker = new MemoryBroker();
    const transport = new MemoryTransport({ broker });
    const metrics = new FleetMetrics({ processMetrics: false });
    const served = [{ model: MODEL, version: '1', artifactPath: `/fake/${MODEL}/1/model.onnx`, modifiedAt: 1 }];
    const snapshot: RepositorySnapshot = { dir: '/fake', models: new Map([[MODEL, { name: MODEL, config, versions: served, served }]]), problems: [] };
    const fleet = parseFleetConfig({ devices: { count: 1, backend: 'sim' }, models: [MODEL], worker: { metricsPort: 0 } });
    const worker = new DeviceWorker({ config: fleet, deviceId: 0, device, transport, metrics, log: createLogger({ level: 'silent' }), snapshot });
    await worker.start();
    const producer = new MemoryProducer({ broker });
    stop = async () => {
      await worker.close();
      await producer.close();
    };
    const results = new Map<string, ResultEnvelope>();
    await producer.subscribeReplies('test.replies', (r) => void results.set(r.id, r));
    // Bucket 16 (3 items, gear 4) and bucket 64 (1 item of 40, gear 1), in whatever batches they form.
    const sent = [tokens('a', 2, 10), tokens('b', 1, 16), tokens('c', 1, 40)];
    await producer.publish(sent);
    const end = Date.now() + 5000;
    while (results.size < sent.length && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
    expect([...results.values()].map((r) => r.status)).toEqual(['ok', 'ok', 'ok']);

    // The device's own view: every token that is not a request's (7) is padding, gear rows included.
    let slots = 0;
    let padded = 0;
    let ratioSum = 0;
    for (const b of batches) {
      const pad = b.tokens.filter((t) => t !== 7n).length;
      slots += b.tokens.length;
      padded += pad;
      ratioSum += pad / b.tokens.length;
    }
    expect(padded).toBeGreaterThan(0);
    const text = await metrics.render();
    expect(sample(text, 'npu_fleet_batch_slots_total')).toBe(slots);
    expect(sample(text, 'npu_fleet_padded_slots_total')).toBe(padded);
    expect(sample(text, 'npu_fleet_batch_padding_ratio_count')).toBe(batches.length);
    expect(sample(text, 'npu_fleet_batch_padding_ratio_sum')).toBeCloseTo(ratioSum, 12);
  });
});
