// Readiness and warm-up checks for a Kafka cluster, through the same client the project uses.
import { Kafka, logLevel } from 'kafkajs';

/** True once the cluster answers metadata with a controller and at least one broker. */
export async function kafkaReady(brokers: string[], timeoutMs = 2_000): Promise<boolean> {
  const kafka = new Kafka({
    clientId: 'test-services-probe',
    brokers,
    logLevel: logLevel.NOTHING,
    connectionTimeout: timeoutMs,
    requestTimeout: timeoutMs,
    retry: { retries: 0 },
  });
  const admin = kafka.admin();
  try {
    await admin.connect();
    const cluster = await admin.describeCluster();
    return cluster.brokers.length > 0 && cluster.controller !== null;
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}

/**
 * A fresh broker creates __consumer_offsets and __transaction_state on first use, and the first
 * group join or InitProducerId then retries for a second or more with "coordinator loading" errors
 * logged. Doing that once here keeps that delay and noise out of the tests.
 */
export async function warmUpKafka(brokers: string[], timeoutMs = 30_000): Promise<void> {
  const kafka = new Kafka({ clientId: 'test-services-warmup', brokers, logLevel: logLevel.NOTHING });
  const deadline = Date.now() + timeoutMs;
  // kafkajs does not retry every coordinator error (e.g. NOT_COORDINATOR while the offsets topic
  // partitions are still being assigned), so each step is retried here until the deadline.
  const retrying = async (what: string, step: () => Promise<void>): Promise<void> => {
    for (;;) {
      try {
        await step();
        return;
      } catch (error) {
        if (Date.now() > deadline) {
          throw new Error(`kafka warm-up (${what}) still failing after ${timeoutMs} ms: ${error instanceof Error ? error.message : String(error)}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
  };
  await retrying('group coordinator', async () => {
    const admin = kafka.admin();
    try {
      await admin.connect();
      // FindCoordinator for a group creates the offsets topic; the fetch needs it loaded.
      await admin.fetchOffsets({ groupId: `test-services-warmup-${process.pid}` });
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
  });
  await retrying('transaction coordinator', async () => {
    // A transactional InitProducerId (kafkajs sends it on the first transaction(), not on connect)
    // creates the transaction state topic and needs it loaded.
    const producer = kafka.producer({ transactionalId: `test-services-warmup-${process.pid}`, maxInFlightRequests: 1, idempotent: true });
    try {
      await producer.connect();
      const transaction = await producer.transaction();
      await transaction.abort();
    } finally {
      await producer.disconnect().catch(() => undefined);
    }
  });
}
