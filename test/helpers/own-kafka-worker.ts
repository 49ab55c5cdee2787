import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { transportFor } from '../../src/cli/worker-deps.ts';
import { parseFleetConfig } from '../../src/contracts/config-loader.ts';
import type { KafkaSettings } from '../../src/contracts/fleet-config.ts';
import type { RequestEnvelope } from '../../src/contracts/request-envelope.ts';
import { openDevice } from '../../src/device/index.ts';
import { createLogger } from '../../src/observability/logger.ts';
import type { Producer } from '../../src/producer/producer.ts';
import { runWorker, type RunningWorker } from '../../src/runtime/worker-process.ts';
import { startLocalKafka, type LocalKafka } from './local-kafka-service.ts';
import { uniqueName } from './services.ts';

/**
 * A Kafka broker of the test's own (to stop and restart) and one simulated worker on it serving
 * mlp-classifier with a 6 s session; both stopped by `cleanups`, the worker first.
 */
export async function startOwnKafkaWorker(name: string, cleanups: Array<() => Promise<unknown>>): Promise<{ kafka: LocalKafka; kafkaSettings: KafkaSettings; worker: RunningWorker }> {
  const kafka = await startLocalKafka(mkdtempSync(join(tmpdir(), `npu-fleet-${name}-kafka-`)));
  cleanups.push(() => kafka.stop());
  process.env['NPU_FLEET_DEVICE'] = 'sim';
  const log = createLogger({ level: 'silent' });
  const config = parseFleetConfig({
    transport: { kind: 'kafka', kafka: { brokers: kafka.brokers, groupId: uniqueName(name), sessionTimeoutMs: 6_000 } },
    devices: { count: 1, backend: 'sim' },
    models: ['mlp-classifier'],
    worker: { metricsPort: 0 },
  });
  if (config.transport.kind !== 'kafka') throw new Error('kafka transport expected');
  const worker = await runWorker(config, 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
  cleanups.push(() => worker.stop());
  return { kafka, kafkaSettings: config.transport.kafka, worker };
}

/**
 * Publishes `request` as soon as the broker, back since `backAt`, takes it (30 s at most), then
 * waits up to 60 s from `backAt` for its reply in `answered`: how long after `backAt` it came.
 */
export async function replyAfterBrokerBack(producer: Producer, request: RequestEnvelope, answered: ReadonlySet<string>, backAt: number): Promise<number> {
  for (;;) {
    try {
      await producer.publish([request]);
      break;
    } catch (err) {
      if (Date.now() - backAt > 30_000) throw err;
      await new Promise((r) => setTimeout(r, 500));
    }
  }
  while (!answered.has(request.id) && Date.now() - backAt < 60_000) await new Promise((r) => setTimeout(r, 100));
  return Date.now() - backAt;
}
