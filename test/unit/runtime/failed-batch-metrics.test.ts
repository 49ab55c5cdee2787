import { afterEach, describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { DeviceWorker } from '../../../src/runtime/device-worker.ts';
import type { DeviceLike, ExecutableModel } from '../../../src/runtime/load-checked.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { MODEL, request, sample, snapshotOf, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

let h: WorkerHarness | undefined;
let stopOther: (() => Promise<void>) | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
  await stopOther?.();
  stopOther = undefined;
});

/** Publishes one request (gear 1: 1 item, no padding) and ends its batch on the device with `outcome`. */
async function runOne(harness: WorkerHarness, id: string, outcome: 'fail' | 'release'): Promise<void> {
  const before = harness.executions.length;
  await harness.producer.publish(request(id, 0));
  await until(() => harness.executions.length === before + 1, 2000, `${id} on the device`);
  const execution = harness.executions[before];
  if (outcome === 'fail') execution?.fail(new FleetError('DEVICE_ERROR', 'aclmdlExecute: device lost'));
  else execution?.release();
  await until(() => harness.results.has(id), 2000, `${id} answered`);
}

describe('a batch that fails is still a batch the device was given', () => {
  it('counts it in npu_fleet_batches_total{outcome="failed"} and in the batch size and padding metrics; its unknown execute time in none', async () => {
    h = await startWorker(snapshotOf('1'));
    await runOne(h, 'ok1', 'release');
    await runOne(h, 'bad1', 'fail');
    await runOne(h, 'bad2', 'fail');
    expect(h.results.get('bad1')?.[0]?.status).toBe('failed');
    const text = await h.metrics.render();
    const series = { model: MODEL, device: '0', gear: '1' };
    // Before: 1 batch in all (the failed ones nowhere), no outcome label.
    expect(sample(text, 'npu_fleet_batches_total', series)).toBe(3);
    expect(sample(text, 'npu_fleet_batches_total', { ...series, outcome: 'ok' })).toBe(1);
    expect(sample(text, 'npu_fleet_batches_total', { ...series, outcome: 'failed' })).toBe(2);
    expect(sample(text, 'npu_fleet_batch_size_count', { model: MODEL })).toBe(3);
    expect(sample(text, 'npu_fleet_batch_slots_total', { model: MODEL })).toBe(3);
    expect(sample(text, 'npu_fleet_batch_padding_ratio_count', { model: MODEL })).toBe(3);
    // A rejected execute reports no device time: only the batch that ran is in the histogram.
    expect(sample(text, 'npu_fleet_device_execute_seconds_count', series)).toBe(1);
    expect(sample(text, 'npu_fleet_device_execute_seconds_sum', series)).toBeCloseTo(0.001, 9);
  });

  it('counts the execute time of a batch that ran on the device and failed after it (its outputs could not be split)', async () => {
    // A model that answers with an output its config.yaml does not declare: scatterOutputs refuses it.
    const executable: ExecutableModel = {
      gears: [1, 2, 4, 8, 16, 32],
      inputs: [{ name: 'input', dtype: 'float32', dims: [-1, 64] }],
      outputs: [{ name: 'probs', dtype: 'float32', dims: [-1, 10] }],
      execute: (_inputs, gear) =>
        Promise.resolve({
          outputs: [
            { data: new Uint8Array(gear * 10 * 4), dims: [gear, 10] },
            { data: new Uint8Array(gear * 4), dims: [gear, 1] },
          ],
          timings: { copyInMs: 0.1, executeMs: 3, copyOutMs: 0.1 },
        }),
      unload: () => Promise.resolve(),
    };
    const device: DeviceLike = { id: 0, loadModel: () => Promise.resolve(executable), memInfo: () => Promise.resolve({ freeBytes: 1, totalBytes: 2 }), close: () => Promise.resolve() };
    const broker = new MemoryBroker();
    const metrics = new FleetMetrics({ processMetrics: false });
    const config = parseFleetConfig({ devices: { count: 1, backend: 'sim' }, models: [MODEL], worker: { metricsPort: 0 } });
    const log = createLogger({ level: 'fatal' });
    const worker = new DeviceWorker({ config, deviceId: 0, device, transport: new MemoryTransport({ broker }), metrics, log, snapshot: snapshotOf('1') });
    await worker.start();
    const producer = new MemoryProducer({ broker });
    stopOther = async () => {
      await worker.close();
      await producer.close();
    };
    const results = new Map<string, ResultEnvelope>();
    await producer.subscribeReplies('test.replies', (r) => results.set(r.id, r));
    await producer.publish(request('split', 0));
    await until(() => results.has('split'), 2000, 'the result');
    expect(results.get('split')?.status).toBe('failed');
    const text = await metrics.render();
    const series = { model: MODEL, device: '0', gear: '1' };
    // Before: 0 and 0.
    expect(sample(text, 'npu_fleet_batches_total', { ...series, outcome: 'failed' })).toBe(1);
    expect(sample(text, 'npu_fleet_device_execute_seconds_sum', series)).toBeCloseTo(0.003, 9);
  });
});
