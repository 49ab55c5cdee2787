// A producer's reply subscription on Kafka across a broker restart: kafkajs restarts its consumer as
// a new group member, and the restarted coordinator held that member's join until the old member's
// 30 s session expired, so replies reached the client only then. The broker is this test's own.
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/observability/logger.ts';
import { createProducer } from '../../../src/producer/index.ts';
import { mlpRequest } from '../../helpers/mlp-request.ts';
import { orderedCleanups } from '../../helpers/ordered-cleanups.ts';
import { replyAfterBrokerBack, startOwnKafkaWorker } from '../../helpers/own-kafka-worker.ts';
import { uniqueName } from '../../helpers/services.ts';
import { until } from '../../helpers/until.ts';

const cleanups = orderedCleanups();


describe('kafka reply subscription across a broker restart', () => {
  it('replies reach the subscriber within seconds of the broker coming back, not after its 30 s session', async () => {
    const { kafka, kafkaSettings, worker } = await startOwnKafkaWorker('producer-restart', cleanups);
    // The producer's errors kept: kafkajs's restart of its reply consumer is waited for by its line.
    const producerLines: string[] = [];
    const producerLog = createLogger({ level: 'error', destination: { write: (line: string) => void producerLines.push(line) } });
    const producer = createProducer({ kind: 'kafka', kafka: kafkaSettings }, { log: producerLog });
    cleanups.push(() => producer.close());
    const replyTo = uniqueName('producer-restart-replies');
    const answered = new Set<string>();
    const sub = await producer.subscribeReplies(replyTo, (r) => void answered.add(r.id));
    cleanups.push(() => sub.close());
    await producer.publish([mlpRequest('before', replyTo)]);
    for (const until = Date.now() + 30_000; !answered.has('before') && Date.now() < until; ) await new Promise((r) => setTimeout(r, 100));
    expect(answered.has('before')).toBe(true);

    const downAt = Date.now();
    process.kill(kafka.pid as number, 'SIGTERM');
    // Down until kafkajs has given the consumers up and restarts them (it first retries): the
    // restarted reply consumer is the new member whose join the restarted coordinator held.
    for (const end = Date.now() + 30_000; worker.worker.readiness().ready && Date.now() < end; ) await new Promise((r) => setTimeout(r, 200));
    await until(() => producerLines.some((l) => l.includes('"msg":"Restarting the consumer in')), 30_000, "kafkajs's restart of the producer's reply consumer");
    console.log(`[producer-restart kafka] down ${Date.now() - downAt} ms`);
    await kafka.restart({});
    const backAt = Date.now();
    const afterMs = await replyAfterBrokerBack(producer, mlpRequest('after', replyTo), answered, backAt);
    console.log(`[producer-restart kafka] reply ${answered.has('after') ? '' : 'NOT '}received ${afterMs} ms after the broker was back`);
    expect(answered.has('after')).toBe(true);
    expect(afterMs).toBeLessThan(15_000);
  }, 150_000);
});
