// A producer's reply subscription across a broker restart whose group coordinator takes LeaveGroup
// only some seconds after the broker answers again. Seen (broker.log of a failed
// kafka-producer-broker-restart run): the broker answered at :22.9, loaded the group at :25.0, and
// the subscriber's old member was never removed: its 30 s session expired at :55.0, and the reply
// came 31.9 s after the broker was back. The remover's LeaveGroup, sent at the first answer, had
// given up (3 attempts in ~0.6 s) before the coordinator took it. Here LeaveGroup requests are cut
// (connection reset: retriable, as the coordinator's not-available answers are) for the first 3 s
// after the broker is back. The broker is this test's own.
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/observability/logger.ts';
import { KafkaProducer } from '../../../src/producer/index.ts';
import { mlpRequest } from '../../helpers/mlp-request.ts';
import { orderedCleanups } from '../../helpers/ordered-cleanups.ts';
import { replyAfterBrokerBack, startOwnKafkaWorker } from '../../helpers/own-kafka-worker.ts';
import { uniqueName } from '../../helpers/services.ts';
import { until } from '../../helpers/until.ts';
import { requestSniffingFactory } from '../transport/produce-sniffer.ts';

const cleanups = orderedCleanups();

/** Kafka's api key of a LeaveGroup request. */
const LEAVE_GROUP_API_KEY = 13;
/** How long after the broker is back its coordinator refuses LeaveGroup (the failed run: 2.1 s). */
const COORDINATOR_LATE_MS = 3_000;

describe('kafka reply subscription across a broker restart whose coordinator is late', () => {
  it('replies reach the subscriber within seconds, though the first LeaveGroups of its old member fail', async () => {
    const { kafka, kafkaSettings, worker } = await startOwnKafkaWorker('producer-late-coordinator', cleanups);

    let refuseLeaveUntil = 0;
    let leavesRefused = 0;
    const socketFactory = requestSniffingFactory(
      'late coordinator',
      (request) => request.readInt16BE(4) === LEAVE_GROUP_API_KEY,
      (socket, leave, forward) => {
        if (!leave || Date.now() >= refuseLeaveUntil) return forward();
        leavesRefused++;
        socket.destroy();
        return false;
      },
    );
    // The subscriber's default session (30 s): the worker's is 6 s, so only the subscriber is timed.
    const producerLines: string[] = [];
    const producerLog = createLogger({ level: 'info', destination: { write: (line: string) => void producerLines.push(line) } });
    const producer = new KafkaProducer({ ...kafkaSettings, sessionTimeoutMs: 30_000 }, { logger: producerLog, socketFactory });
    cleanups.push(() => producer.close());
    const replyTo = uniqueName('producer-late-coordinator-replies');
    const answered = new Set<string>();
    const sub = await producer.subscribeReplies(replyTo, (r) => void answered.add(r.id));
    cleanups.push(() => sub.close());
    await producer.publish([mlpRequest('before', replyTo)]);
    await until(() => answered.has('before'), 30_000, "the reply to 'before'");

    process.kill(kafka.pid as number, 'SIGTERM');
    for (const end = Date.now() + 30_000; worker.worker.readiness().ready && Date.now() < end; ) await new Promise((r) => setTimeout(r, 200));
    await until(() => producerLines.some((l) => l.includes('"msg":"Restarting the consumer in')), 30_000, "kafkajs's restart of the producer's reply consumer");
    refuseLeaveUntil = Number.POSITIVE_INFINITY;
    await kafka.restart({});
    const backAt = Date.now();
    refuseLeaveUntil = backAt + COORDINATOR_LATE_MS;
    const afterMs = await replyAfterBrokerBack(producer, mlpRequest('after', replyTo), answered, backAt);
    console.log(`[producer-late-coordinator kafka] ${leavesRefused} LeaveGroup refused; reply ${answered.has('after') ? '' : 'NOT '}received ${afterMs} ms after the broker was back`);
    for (const l of producerLines) if (/remov|no longer/.test(l)) console.log(l.trim());
    // The fault was there: the remover's first LeaveGroup came while it was refused.
    expect(leavesRefused).toBeGreaterThan(0);
    expect(producerLines.some((l) => l.includes("removed this client's earlier consumer's member"))).toBe(true);
    expect(answered.has('after')).toBe(true);
    expect(afterMs).toBeLessThan(15_000);
  }, 150_000);
});
