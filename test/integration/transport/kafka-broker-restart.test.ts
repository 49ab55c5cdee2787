// A worker on Kafka whose broker restarts (an upgrade, a crash) while it serves: kafkajs restarts
// its consumer as a new group member, and the restarted coordinator holds that member's join until
// the old member's session expires. The worker must read again within seconds of the broker's
// return, not after sessionTimeoutMs (default 30 s). The broker is this test's own.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { createProducer } from '../../../src/producer/index.ts';
import { runWorker } from '../../../src/runtime/worker-process.ts';
import { startLocalKafka } from '../../helpers/local-kafka-service.ts';
import { mlpRequest } from '../../helpers/mlp-request.ts';
import { orderedCleanups } from '../../helpers/ordered-cleanups.ts';
import { uniqueName } from '../../helpers/services.ts';
import { until } from '../../helpers/until.ts';

const cleanups = orderedCleanups();


/** A fresh producer (its own reply consumer is new, so only the worker's rejoin is timed): ms until `ids` are answered. */
async function answeredWithinMs(transport: Parameters<typeof createProducer>[0], ids: readonly string[]): Promise<number> {
  const startedAt = Date.now();
  const producer = createProducer(transport, {});
  cleanups.push(() => producer.close());
  const replyTo = uniqueName('restart-replies');
  const answered = new Set<string>();
  const sub = await producer.subscribeReplies(replyTo, (r) => void answered.add(r.id));
  cleanups.push(() => sub.close());
  for (;;) {
    try {
      await producer.publish(ids.map((id) => mlpRequest(id, replyTo)));
      break;
    } catch (err) {
      if (Date.now() - startedAt > 30_000) throw err;
      await new Promise((r) => setTimeout(r, 500));
    }
  }
  while (answered.size < ids.length && Date.now() - startedAt < 60_000) await new Promise((r) => setTimeout(r, 100));
  expect(answered.size).toBe(ids.length);
  return Date.now() - startedAt;
}

describe('kafka broker restart under a running worker', () => {
  it('the worker reads again within seconds of the broker coming back, not after its 30 s session timeout', async () => {
    const kafka = await startLocalKafka(mkdtempSync(join(tmpdir(), 'npu-fleet-broker-restart-kafka-')));
    cleanups.push(() => kafka.stop());
    process.env.NPU_FLEET_DEVICE = 'sim';
    // Warnings kept: the consumer's crash (and kafkajs's restart of it) is waited for by its line.
    const warnings: string[] = [];
    const log = createLogger({ level: 'warn', destination: { write: (line: string) => void warnings.push(line) } });
    // The default session timeout (30 s): what a production worker runs with.
    const config = parseFleetConfig({
      transport: { kind: 'kafka', kafka: { brokers: kafka.brokers, groupId: uniqueName('broker-restart') } },
      devices: { count: 1, backend: 'sim' },
      models: ['mlp-classifier'],
      worker: { metricsPort: 0 },
    });
    expect(config.transport.kind === 'kafka' && config.transport.kafka.sessionTimeoutMs).toBe(30_000);
    const worker = await runWorker(config, 0, { artifact: 'onnx', openDevice, createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
    cleanups.push(() => worker.stop());
    await answeredWithinMs(config.transport, ['before-1', 'before-2']);

    const downAt = Date.now();
    process.kill(kafka.pid as number, 'SIGTERM');
    for (const end = Date.now() + 30_000; worker.worker.readiness().ready && Date.now() < end; ) await new Promise((r) => setTimeout(r, 200));
    expect(worker.worker.readiness().ready, 'unready while the broker is down').toBe(false);
    // Down until kafkajs has given its consumer up and restarts it (it first retries): the
    // restarted consumer is the new member whose join the restarted coordinator holds.
    await until(() => warnings.some((l) => l.includes('kafka consumer failed; kafkajs restarts it')), 30_000, "kafkajs's restart of the worker's consumer");
    console.log(`[broker-restart kafka] down ${Date.now() - downAt} ms`);
    await kafka.restart({});

    const afterMs = await answeredWithinMs(config.transport, ['after-1', 'after-2']);
    console.log(`[broker-restart kafka] answered ${afterMs} ms after the broker was back`);
    expect(afterMs).toBeLessThan(15_000);
    expect(worker.worker.status).toBe('running');
  }, 150_000);
});
