// Request topic templates on a real Kafka broker, with a real worker and two example models.
// Each model has its own request topics ({model} is required, src/contracts/fleet-config.ts): a
// worker that does not serve a model leaves its requests at the broker for one that does. A
// template without {priority} (one topic per model for all its priorities) is supported.
import { cpSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { FleetConfig } from '../../../src/contracts/fleet-config.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { createProducer } from '../../../src/producer/index.ts';
import { runWorker, type RunningWorker } from '../../../src/runtime/worker-process.ts';
import { createTransport, KafkaDeadLetters } from '../../../src/transport/index.ts';
import type { Delivery } from '../../../src/transport/transport.ts';
import { orderedCleanups } from '../../helpers/ordered-cleanups.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { until } from '../../helpers/until.ts';

const MLP = 'mlp-classifier';
const CNN = 'small-cnn';

const closers = orderedCleanups();

function mlp(id: string, priority: number, replyTo: string): RequestEnvelope {
  return { id, model: MLP, priority, createdAt: Date.now(), replyTo, inputs: [{ name: 'input', dtype: 'float32', shape: [1, 64], data: new Uint8Array(64 * 4) }] };
}
function cnn(id: string, priority: number, replyTo: string): RequestEnvelope {
  return { id, model: CNN, priority, createdAt: Date.now(), replyTo, inputs: [{ name: 'image', dtype: 'float32', shape: [1, 1, 28, 28], data: new Uint8Array(28 * 28 * 4) }] };
}

/** A fleet config of this test's own topics and group, serving `models` from a copy of the examples. */
function fleetConfig(tag: string, topicTemplate: string, models: string[]): FleetConfig {
  process.env.NPU_FLEET_DEVICE = 'sim';
  const repo = join(tempDir('npu-fleet-templates-'), 'models');
  for (const m of models) cpSync(join('examples/models', m), join(repo, m), { recursive: true });
  return parseFleetConfig({
    modelRepository: repo,
    transport: {
      kind: 'kafka',
      kafka: { brokers: getServices().kafkaBrokers, groupId: `${tag}.g`, topicTemplate: `${tag}.${topicTemplate}`, repliesTemplate: `${tag}.{model}.replies`, dlqTemplate: `${tag}.{model}.dlq` },
    },
    devices: { count: 1, backend: 'sim' },
    models,
    worker: { metricsPort: 0 },
  });
}

async function startWorker(config: FleetConfig): Promise<RunningWorker> {
  const log = createLogger({ level: 'silent' });
  const worker = await runWorker(config, 0, { artifact: 'onnx', openDevice: (id) => openDevice(id), createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
  closers.push(() => worker.stop());
  return worker;
}

/** Results on `replyTo`, as `model:status` by request id. */
async function results(config: FleetConfig, replyTo: string): Promise<Map<string, string>> {
  const producer = createProducer(config.transport, {});
  closers.push(() => producer.close());
  const out = new Map<string, string>();
  const sub = await producer.subscribeReplies(replyTo, (r) => void out.set(r.id, `${r.model}:${r.status}${r.error ? `:${r.error.code}` : ''}`));
  closers.push(() => sub.close());
  return out;
}

describe('request topic templates (real Kafka, real worker)', () => {
  it("a worker serving one of two models leaves the other's requests in their own topic: not rejected, not dead-lettered", async () => {
    const tag = uniqueName('tpl-one').replace(/-/g, '');
    const config = fleetConfig(tag, '{model}.requests.p{priority}', [MLP]);
    const replyTo = `${tag}.replies`;
    const seen = await results(config, replyTo);
    await startWorker(config);
    const producer = createProducer(config.transport, {});
    closers.push(() => producer.close());
    await producer.publish([...Array.from({ length: 5 }, (_, i) => cnn(`c${i}`, 1, replyTo)), mlp('m0', 1, replyTo)]);
    await until(() => seen.has('m0'), 30_000, 'the served model was answered');
    // Time for the worker to have fetched the other model's requests, were they in its topics.
    await new Promise((r) => setTimeout(r, 3_000));
    expect(Object.fromEntries(seen)).toEqual({ m0: `${MLP}:ok` });
    if (config.transport.kind !== 'kafka') throw new Error('kafka config expected');
    const dlq = new KafkaDeadLetters(config.transport.kafka);
    closers.push(() => dlq.close());
    expect((await dlq.list({ model: MLP })).scanned).toBe(0);
  }, 90_000);

  it('without {priority}: one topic per model carries all its priorities, each request is served by its model, the priority label is none', async () => {
    const tag = uniqueName('tpl-nopri').replace(/-/g, '');
    const config = fleetConfig(tag, '{model}.requests', [MLP, CNN]);
    const replyTo = `${tag}.replies`;
    const seen = await results(config, replyTo);
    const running = await startWorker(config);
    const producer = createProducer(config.transport, {});
    closers.push(() => producer.close());
    const sent = [0, 1, 2].flatMap((p) => [mlp(`m${p}`, p, replyTo), cnn(`c${p}`, p, replyTo)]);
    await producer.publish(sent);
    await until(() => seen.size === sent.length, 30_000, 'every request answered');
    expect(Object.fromEntries(seen)).toEqual(Object.fromEntries(sent.map((r) => [r.id, `${r.model}:ok`])));
    const e2e = await running.metrics.registry.getSingleMetric('npu_fleet_end_to_end_latency_seconds')?.get();
    const labels = new Set(e2e?.values.map((v) => `${String(v.labels.model)}/${String(v.labels.priority)}`));
    expect([...labels].sort()).toEqual([`${MLP}/none`, `${CNN}/none`]);
  }, 90_000);

  it("without {priority}: pausing one model's intake holds its one topic (every priority) and not the other model's", async () => {
    const tag = uniqueName('tpl-pause').replace(/-/g, '');
    const config = fleetConfig(tag, '{model}.requests', [MLP, CNN]);
    if (config.transport.kind !== 'kafka') throw new Error('kafka config expected');
    const transport = createTransport(config.transport, { kafka: { partitions: 1 } });
    closers.push(() => transport.close());
    const got: Delivery[] = [];
    await transport.start({
      subscriptions: [
        { model: MLP, priorityLevels: 3 },
        { model: CNN, priorityLevels: 3 },
      ],
      onDeliveries: (ds) => void got.push(...ds),
    });
    transport.pause(MLP, [0, 1, 2]);
    const producer = createProducer(config.transport, {});
    closers.push(() => producer.close());
    await producer.publish([mlp('m0', 0, 'x'), mlp('m2', 2, 'x'), cnn('c0', 0, 'x'), cnn('c2', 2, 'x')]);
    await until(() => got.length >= 2, 30_000, "the other model's requests delivered");
    await new Promise((r) => setTimeout(r, 2_000));
    expect(got.map((d) => `${d.model}/${String(d.priority)}`)).toEqual([`${CNN}/undefined`, `${CNN}/undefined`]);
    transport.resume(MLP, [0, 1, 2]);
    await until(() => got.length >= 4, 30_000, 'the paused model delivered once resumed');
    expect(got.slice(2).map((d) => d.model)).toEqual([MLP, MLP]);
  }, 90_000);
});
