// A video pipeline publishes a stream's frames with one streamKey (one Kafka partition) and
// nondecreasing deadlines: the worker must answer them in frame order, through batching, two
// batches in flight, concurrent settles and the serialized Kafka send path.
import { afterEach, describe, expect, it } from 'vitest';
import { loadModelConfig, parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { FleetConfig } from '../../../src/contracts/fleet-config.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { createProducer } from '../../../src/producer/index.ts';
import type { Producer } from '../../../src/producer/producer.ts';
import { prng, syntheticRequest } from '../../../src/runtime/demo-load.ts';
import { runWorker, type RunningWorker } from '../../../src/runtime/worker-process.ts';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { uniqueKafkaTransport, uniqueName } from '../../helpers/services.ts';

const STREAMS = 6;
const FRAMES = 150;
const log = createLogger({ level: 'warn' });

const running: Array<{ stop(): Promise<unknown> }> = [];
afterEach(async () => {
  for (const r of running.splice(0).reverse()) await r.stop().catch(() => undefined);
});

async function framesInOrder(config: FleetConfig, broker: MemoryBroker | undefined): Promise<void> {
  process.env.NPU_FLEET_DEVICE = 'sim';
  const worker: RunningWorker = await runWorker(
    config,
    0,
    { artifact: 'onnx', openDevice, createTransport: (c) => (broker === undefined ? transportFor(c, log) : new MemoryTransport({ broker })) },
    { log, metricsPort: 0 },
  );
  running.push(worker);
  const producer: Producer = createProducer(config.transport, { memoryBroker: broker, partitions: 4 });
  running.push({ stop: () => producer.close() });
  const replyTo = uniqueName('frames');
  const seen = new Map<string, number[]>();
  const statuses: string[] = [];
  const sub = await producer.subscribeReplies(replyTo, (r: ResultEnvelope) => {
    const [stream, frame] = r.id.split('~');
    const list = seen.get(stream as string) ?? [];
    list.push(Number(frame));
    seen.set(stream as string, list);
    statuses.push(r.status);
  });
  running.push({ stop: () => sub.close() });

  const model = loadModelConfig('examples/models/mlp-classifier/config.yaml');
  const rand = prng(11);
  const t0 = Date.now();
  for (let f = 0; f < FRAMES; f++) {
    const frames = Array.from({ length: STREAMS }, (_, s) => ({
      ...syntheticRequest(model, f, rand, { idPrefix: 'frame', replyTo, deadlineShare: 0, maxSamples: 1 }),
      id: `cam${s}~${f}`,
      streamKey: `cam${s}`,
      priority: 1,
      createdAt: Date.now(),
      deadlineAt: t0 + 60_000 + f,
    }));
    await producer.publish(frames);
  }
  const deadline = Date.now() + 60_000;
  while (statuses.length < STREAMS * FRAMES && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  expect(statuses.length).toBe(STREAMS * FRAMES);
  expect(statuses.every((s) => s === 'ok')).toBe(true);
  for (let s = 0; s < STREAMS; s++) {
    expect(seen.get(`cam${s}`), `stream cam${s}`).toEqual(Array.from({ length: FRAMES }, (_, f) => f));
  }
}

describe('one stream\'s results come back in frame order', () => {
  it('on the memory broker', async () => {
    const config = parseFleetConfig({ devices: { count: 1, backend: 'sim' }, models: ['mlp-classifier'], worker: { metricsPort: 0 }, log: { level: 'warn' } });
    await framesInOrder(config, new MemoryBroker());
  }, 90_000);

  it('on Kafka (one partition per stream key)', async () => {
    const config = parseFleetConfig({
      transport: uniqueKafkaTransport('order'),
      devices: { count: 1, backend: 'sim' },
      models: ['mlp-classifier'],
      worker: { metricsPort: 0 },
      log: { level: 'warn' },
    });
    await framesInOrder(config, undefined);
  }, 120_000);
});
